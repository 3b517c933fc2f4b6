// The agent reserves its SNAT port range in net.ipv4.ip_local_reserved_ports while it runs and
// puts the previous value back when it closes. The sysctl is per network namespace: the
// dataplane is opened from inside a private one, whose value nothing else touches.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { BpfDataplane } from '../../src/dataplanes/bpf/dataplane.js';
import { SNAT_PORT_RANGE } from '../../src/dataplanes/bpf/snat-ports.js';
import { RESERVED_PORTS_SYSCTL } from '../../src/host/reserved-ports.js';
import { Lab } from '../../src/lab/netns.js';
import { silentLogger } from '../../src/logger.js';
import { makePinDir, removePinDir } from '../support/bpffs.js';
import { enterNetns } from '../support/in-netns.js';
import { describeRoot } from '../support/privileges.js';

/** Read from this thread, which is in the lab namespace (a synchronous call stays on it). */
const reserved = () => readFileSync(RESERVED_PORTS_SYSCTL, 'utf8').trim();

describeRoot('SNAT port reservation (net.ipv4.ip_local_reserved_ports)', () => {
  const lab = new Lab(`hdp-rp${process.pid}`);
  let pinPath = '';
  let stateDir = '';
  let leave: (() => void) | null = null;

  beforeAll(async () => {
    await lab.addNamespace('node');
    // Something of the administrator's own, which must survive.
    await lab.sysctl('node', 'net.ipv4.ip_local_reserved_ports', '8080,9000-9010');
    pinPath = makePinDir('reserved-ports');
    stateDir = mkdtempSync(join(tmpdir(), 'hdp-rp-'));
    leave = enterNetns(lab.ns('node'));
  });
  afterAll(async () => {
    leave?.();
    removePinDir(pinPath);
    rmSync(stateDir, { recursive: true, force: true });
    await lab.destroy();
  });

  async function open() {
    const loaded = loadConfig({ flags: {} });
    if (!loaded.ok) throw new Error('default config does not load');
    const config = { ...loaded.config, bpf: { ...loaded.config.bpf, pinPath, socketLB: 'off' as const } };
    return BpfDataplane.open(config, silentLogger, {
      watchInterfaces: false,
      conntrackGC: false,
      namesFile: join(stateDir, 'agent.names.json'),
    });
  }

  it('adds the SNAT range while the agent runs and restores the previous value on close', async () => {
    expect(reserved()).toBe('8080,9000-9010');
    const dp = await open();
    expect(reserved()).toBe(`8080,9000-9010,${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}`);
    await dp.close();
    expect(reserved()).toBe('8080,9000-9010');
  });

  it('after a run that did not exit cleanly, a clean exit still restores the value from before it', async () => {
    const crashed = await open();
    // As if the process died: the programs' fds close, the sysctl and the state file stay.
    crashed.lb.close();
    const dp = await open();
    expect(reserved()).toBe(`8080,9000-9010,${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}`);
    await dp.close();
    expect(reserved()).toBe('8080,9000-9010');
  });
});
