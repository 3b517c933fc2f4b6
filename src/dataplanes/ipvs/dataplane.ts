// `run --proxy-mode ipvs`: brings the kernel to the rendered ipvs state the way kube-proxy's ipvs
// proxier does on each sync: ipsets, kube-ipvs0 and its addresses, virtual and real servers (one
// `ipvsadm -R` batch of differences), the companion iptables rules (one iptables-restore), then
// stale addresses. Removed TCP real servers drain: weight 0 until their connections are gone
// (kube-proxy's graceful termination manager); UDP and SCTP ones go at once. Failed companion
// iptables-restore runs are counted per family, the one rule-mode metric kube-proxy 1.37's ipvs
// proxier sets (kubeproxy_sync_proxy_rules_iptables_restore_failures_total).

import { type Dataplane, escalate, type SyncResult, type SyncScope } from '../../brain/dataplane.js';
import type { FamilyDecisions, ProxyDecisions } from '../../brain/types.js';
import type { ProxyConfig } from '../../config/types.js';
import { type CommandRunner, runCommand } from '../../host/command.js';
import type { IpAddrInterface } from '../../host/interfaces.js';
import { parseIpAddrJson } from '../../host/interfaces.js';
import type { IPFamily } from '../../model/types.js';
import {
  detectIptablesBackend,
  type IptablesBackend,
  type IptablesCapabilities,
  iptablesBinary,
  probeIptablesCapabilities,
  waitFlags,
} from '../iptables/backend.js';
import { ensureJumps } from '../iptables/dataplane.js';
import type { RuleModeStats } from '../stats.js';
import { PerFamily, syncEachFamily } from '../types.js';
import {
  diffVirtualServers,
  ipsetRestoreInput,
  parseConnectionCounts,
  parseIpsetSave,
  parseIpvsadmSave,
} from './kernel-state.js';
import { IPVS_DUMMY_DEVICE, IPVS_JUMP_RULES } from './names.js';
import { boundAddressCIDR, buildIpvsState, nodeAddressSet } from './plan.js';

/** kube-proxy checks draining real servers every minute (rsCheckDeleteInterval). */
export const DRAIN_CHECK_INTERVAL_MS = 60_000;

/** Kernels from 5.9 fixed conn_reuse_mode's 1 s stall (kubernetes#93297); older ones get 0. */
const CONN_REUSE_FIXED_KERNEL = [5, 9];

export interface IpvsDataplaneOptions {
  config: Pick<ProxyConfig, 'ipvs'>;
  /** Where the commands run (default: this host). */
  exec?: CommandRunner;
  backend?: IptablesBackend;
  capabilities?: IptablesCapabilities;
  drainCheckIntervalMs?: number;
}

interface Draining {
  service: string;
  realServer: string;
}

export class IpvsSyncError extends Error {}

export class IpvsDataplane implements Dataplane {
  readonly mode = 'ipvs' as const;
  /** "<service>/<ip:port>" of real servers at weight 0, waiting for their connections to end. */
  private readonly draining = new Map<string, Draining>();
  private prepared = false;
  private jumpsEnsured = new Set<IPFamily>();
  private drainTimer: NodeJS.Timeout | null = null;
  private drainRunning: Promise<void> = Promise.resolve();
  private readonly familyStats = new PerFamily<Required<Pick<RuleModeStats, 'restoreFailures'>>>(() => ({
    restoreFailures: 0,
  }));

  constructor(
    readonly backend: IptablesBackend,
    readonly capabilities: IptablesCapabilities,
    private readonly options: IpvsDataplaneOptions & { exec: CommandRunner },
  ) {}

  /** The family's counters for the metrics; undefined before its first sync. */
  stats(family: IPFamily): RuleModeStats | undefined {
    return this.familyStats.peek(family);
  }

  /** Real servers still draining, as "<ipvsadm service>/<ip:port>". */
  drainingRealServers(): string[] {
    return [...this.draining.keys()].sort();
  }

  async sync(decisions: ProxyDecisions, scope: SyncScope): Promise<SyncResult> {
    if (!this.prepared) {
      await this.prepareNode();
      this.prepared = true;
    }
    if (scope.full) this.jumpsEnsured.clear();
    const interfaces = await this.interfaces();
    // Every sync writes every virtual server, as kube-proxy's ipvs mode does.
    const full = escalate(scope, 'ipvs: every sync is a full one');
    const result = await syncEachFamily(decisions.families, full, async (family) => {
      try {
        await this.syncFamily(family, interfaces);
      } catch (err) {
        this.jumpsEnsured.delete(family.family);
        throw err;
      }
      return full;
    });
    this.scheduleDrainCheck();
    return result;
  }

  async close(): Promise<void> {
    // The kernel state stays, as kube-proxy's does; `cleanup` removes it.
    if (this.drainTimer) clearInterval(this.drainTimer);
    this.drainTimer = null;
    await this.drainRunning;
  }

  /** One pass of the graceful termination manager: deletes drained real servers. */
  async checkDraining(): Promise<void> {
    if (this.draining.size === 0) return;
    const run = this.drainRunning.then(() => this.deleteDrained());
    this.drainRunning = run.catch(() => undefined);
    await run;
  }

  private async deleteDrained(): Promise<void> {
    const { exec } = this.options;
    const counts = parseConnectionCounts((await exec('ipvsadm', ['-Ln'])).stdout);
    const commands: string[] = [];
    for (const [key, entry] of this.draining) {
      const connections = counts.get(key);
      // Gone already (its virtual server was deleted): nothing left to wait for.
      if (connections === undefined) this.draining.delete(key);
      else if (connections === 0) {
        commands.push(`-d ${entry.service} -r ${entry.realServer}`);
        this.draining.delete(key);
      }
    }
    if (commands.length > 0) await this.ipvsadmRestore(commands);
  }

  private scheduleDrainCheck(): void {
    if (this.draining.size === 0 || this.drainTimer) return;
    this.drainTimer = setInterval(() => {
      this.checkDraining()
        .catch(() => undefined)
        .finally(() => {
          if (this.draining.size === 0 && this.drainTimer) {
            clearInterval(this.drainTimer);
            this.drainTimer = null;
          }
        });
    }, this.options.drainCheckIntervalMs ?? DRAIN_CHECK_INTERVAL_MS);
    this.drainTimer.unref();
  }

  /** NewProxier's sysctls and timeouts, and the dummy device. */
  private async prepareNode(): Promise<void> {
    const { exec, config } = this.options;
    // ipvsadm loads ip_vs, which creates the net.ipv4.vs sysctls.
    await exec('ipvsadm', ['-Ln']);
    const sysctls = [
      'net.ipv4.vs.conntrack=1',
      'net.ipv4.vs.expire_nodest_conn=1',
      'net.ipv4.vs.expire_quiescent_template=1',
      'net.ipv4.ip_forward=1',
    ];
    const release = (await exec('uname', ['-r'])).stdout.trim();
    const [major = 0, minor = 0] = release.split(/[.-]/).map(Number);
    const [fixedMajor = 0, fixedMinor = 0] = CONN_REUSE_FIXED_KERNEL;
    if (major < fixedMajor || (major === fixedMajor && minor < fixedMinor)) {
      sysctls.push('net.ipv4.vs.conn_reuse_mode=0');
    }
    if (config.ipvs.strictARP) {
      sysctls.push('net.ipv4.conf.all.arp_ignore=1', 'net.ipv4.conf.all.arp_announce=2');
    }
    await exec('sysctl', ['-qw', ...sysctls]);
    const { tcpTimeoutSeconds, tcpFinTimeoutSeconds, udpTimeoutSeconds } = config.ipvs;
    if (tcpTimeoutSeconds || tcpFinTimeoutSeconds || udpTimeoutSeconds) {
      // 0 leaves a timeout unchanged.
      await exec('ipvsadm', [
        '--set',
        String(tcpTimeoutSeconds),
        String(tcpFinTimeoutSeconds),
        String(udpTimeoutSeconds),
      ]);
    }
    const link = await exec('ip', ['link', 'show', IPVS_DUMMY_DEVICE], { allowFailure: true });
    if (link.code !== 0) await exec('ip', ['link', 'add', IPVS_DUMMY_DEVICE, 'type', 'dummy']);
  }

  private async interfaces(): Promise<IpAddrInterface[]> {
    return parseIpAddrJson((await this.options.exec('ip', ['-j', 'addr', 'show'])).stdout);
  }

  private async syncFamily(decisions: FamilyDecisions, interfaces: IpAddrInterface[]): Promise<void> {
    const { exec, config } = this.options;
    const family = decisions.family;
    const stats = this.familyStats.get(family);
    const state = buildIpvsState(decisions, {
      scheduler: config.ipvs.scheduler,
      randomFully: this.capabilities.randomFully,
      nodeAddresses: nodeAddressSet(interfaces, family),
    });

    // Sets first: the rules below reference them.
    const ipsets = ipsetRestoreInput(state.ipsets, parseIpsetSave((await exec('ipset', ['save'])).stdout));
    if (ipsets !== '') await exec('ipset', ['restore'], { input: ipsets });

    const bound = new Set(
      (interfaces.find((iface) => iface.ifname === IPVS_DUMMY_DEVICE)?.addr_info ?? [])
        .filter((info) => info.family === (family === 'IPv4' ? 'inet' : 'inet6'))
        .map((info) => info.local),
    );
    const toBind = state.boundAddresses.filter((ip) => !bound.has(ip));
    await this.ipBatch(toBind.map((ip) => `addr add ${boundAddressCIDR(ip)} dev ${IPVS_DUMMY_DEVICE}`));

    const applied = parseIpvsadmSave((await exec('ipvsadm', ['-Sn'])).stdout);
    const diff = diffVirtualServers(state.virtualServers, applied, {
      family,
      excludeCIDRs: config.ipvs.excludeCIDRs,
      draining: new Set(this.draining.keys()),
    });
    for (const key of diff.revived) this.draining.delete(key);
    const commands = [...diff.commands];
    if (diff.removed.some((rs) => rs.graceful)) {
      // GracefulDeleteRS: delete at once when idle, else weight 0 and wait.
      const counts = parseConnectionCounts((await exec('ipvsadm', ['-Ln'])).stdout);
      for (const rs of diff.removed.filter((r) => r.graceful)) {
        const key = `${rs.service}/${rs.realServer}`;
        if ((counts.get(key) ?? 0) === 0) commands.push(`-d ${rs.service} -r ${rs.realServer}`);
        else {
          commands.push(`-e ${rs.service} -r ${rs.realServer} -m -w 0`);
          this.draining.set(key, { service: rs.service, realServer: rs.realServer });
        }
      }
    }
    for (const rs of diff.removed.filter((r) => !r.graceful)) {
      commands.push(`-d ${rs.service} -r ${rs.realServer}`);
    }
    if (commands.length > 0) await this.ipvsadmRestore(commands);

    if (!this.jumpsEnsured.has(family)) {
      await ensureJumps(exec, this.backend, family, IPVS_JUMP_RULES);
      this.jumpsEnsured.add(family);
    }
    const restore = await exec(
      iptablesBinary(this.backend, family, 'restore'),
      [...waitFlags(this.backend), '--noflush', '--counters'],
      { input: state.iptablesRestore, allowFailure: true },
    );
    if (restore.code !== 0) {
      stats.restoreFailures++;
      throw new IpvsSyncError(`${family} iptables-restore failed: ${restore.stderr.trim()}`);
    }

    const keep = new Set(state.boundAddresses);
    await this.ipBatch(
      [...bound]
        .filter((ip) => !keep.has(ip))
        .map((ip) => `addr del ${boundAddressCIDR(ip)} dev ${IPVS_DUMMY_DEVICE}`),
    );
  }

  private async ipvsadmRestore(commands: string[]): Promise<void> {
    const result = await this.options.exec('ipvsadm', ['-R'], {
      input: `${commands.join('\n')}\n`,
      allowFailure: true,
    });
    if (result.code !== 0) throw new IpvsSyncError(`ipvsadm -R failed: ${result.stderr.trim()}`);
  }

  private async ipBatch(lines: string[]): Promise<void> {
    if (lines.length === 0) return;
    await this.options.exec('ip', ['-batch', '-'], { input: `${lines.join('\n')}\n` });
  }
}

export async function openIpvsDataplane(options: IpvsDataplaneOptions): Promise<IpvsDataplane> {
  const exec = options.exec ?? runCommand;
  const backend = options.backend ?? (await detectIptablesBackend(exec));
  const capabilities = options.capabilities ?? (await probeIptablesCapabilities({ exec, backend }));
  return new IpvsDataplane(backend, capabilities, { ...options, exec });
}
