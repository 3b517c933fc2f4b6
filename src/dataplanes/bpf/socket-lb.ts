// bpf.socketLB: the cgroup socket hooks (connect, sendmsg, recvmsg, getpeername) that balance
// host-namespace clients, attached once at start on the configured cgroup (attach.ts does the
// attaching).

import { netnsCookie } from '../../../native/libc.js';
import type { BpfConfig } from '../../config/types.js';
import {
  findCgroup2Root,
  firstUncoveredProcess,
  pidsInCgroupTree,
  processesInOwnNetns,
  socketHookCgroupDir,
  uncoveredProcessWarning,
} from '../../host/cgroup.js';
import type { Logger } from '../../logger.js';
import { sockHooksFor, syncSockHooks } from './attach.js';
import type { KernelStore } from './kernel-store.js';
import { SOCK_SCOPE } from './layout.js';
import type { LoadedObject } from './object.js';

/**
 * The socket hooks of bpf.socketLB on the configured cgroup (the node's: the cgroup2 root by
 * default, narrowed to the node's cgroup where the kubelet's pods live below one), or none when it
 * is off. Scope "host" needs this namespace's cookie (SO_NETNS_COOKIE, kernel
 * 5.14+): without it the hooks stay off and host clients keep only what tc gives them.
 */
export function attachSocketLB(
  lb: LoadedObject,
  store: KernelStore,
  bpf: Pick<BpfConfig, 'socketLB' | 'cgroupPath'>,
  ipv6Sockets: boolean,
  log: Logger,
): void {
  const cgroup = socketLBCgroup(store, bpf, log);
  let report: ReturnType<typeof syncSockHooks>;
  try {
    report = syncSockHooks(lb.pinDir, lb.prog, cgroup, sockHooksFor(ipv6Sockets));
  } catch (err) {
    log.error({ err, cgroup }, 'attaching the socket hooks failed');
    return;
  }
  for (const hook of report.attached) log.info({ hook, cgroup }, 'bpf program attached');
  for (const hook of report.replaced) log.info({ hook, cgroup }, 'bpf program swapped in');
  for (const hook of report.detached) log.info({ hook }, 'bpf program detached');
  if (cgroup !== null) warnIfCgroupMissesProcesses(cgroup, log);
}

/** The cgroup the hooks go on, with the programs' scope written; null when they stay off. */
function socketLBCgroup(
  store: KernelStore,
  { socketLB, cgroupPath }: Pick<BpfConfig, 'socketLB' | 'cgroupPath'>,
  log: Logger,
): string | null {
  if (socketLB === 'off') return null;
  try {
    store.writeSockConfig({
      hostNetnsCookie: socketLB === 'host' ? netnsCookie() : 0n,
      scope: SOCK_SCOPE[socketLB],
    });
    return socketHookCgroupDir(cgroupPath || findCgroup2Root());
  } catch (err) {
    log.warn(
      { err, socketLB },
      'socket-level load balancing unavailable: host-namespace clients of services are not balanced',
    );
    return null;
  }
}

/** Once, at start: clients the socket hooks cannot see would get only tc's translation, silently. */
function warnIfCgroupMissesProcesses(cgroup: string, log: Logger): void {
  try {
    const agent = { pid: process.pid, comm: process.title };
    const outside = firstUncoveredProcess(agent, processesInOwnNetns(), pidsInCgroupTree(cgroup));
    if (outside)
      log.warn({ cgroup, pid: outside.pid, comm: outside.comm }, uncoveredProcessWarning(cgroup, outside));
  } catch (err) {
    log.debug({ err: String(err), cgroup }, 'cannot check which processes the socket hooks see');
  }
}
