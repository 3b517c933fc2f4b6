import { rmSync } from 'node:fs';
import { afterAll, expect, it } from 'vitest';
import { type LoadedObject, loadPinnedObject } from '../../src/dataplanes/bpf/object.js';
import { silentLogger } from '../../src/logger.js';
import { bpfConfig } from '../support/bpf-fixtures.js';
import { describeRoot } from '../support/privileges.js';

const pinPath = `/sys/fs/bpf/kbp-test-object-load-${process.pid}`;

describeRoot('loading the data plane object', () => {
  let lb: LoadedObject | undefined;
  afterAll(() => {
    lb?.close();
    rmSync(pinPath, { recursive: true, force: true });
  });

  // The agent reads its Services while the kernel verifies the programs (src/cli/run.ts): that
  // only overlaps if the event loop keeps turning during bpf_object__load.
  it('verifies the programs off the event loop, and the loaded object serves its maps and programs', async () => {
    let turns = 0;
    let spinning = true;
    const spin = () => {
      turns++;
      if (spinning) setImmediate(spin);
    };
    setImmediate(spin);
    try {
      lb = await loadPinnedObject({
        pinPath,
        mapSizes: { ...bpfConfig().mapSizes, conntrack: 1024, affinity: 1024 },
        log: silentLogger,
      });
    } finally {
      spinning = false;
    }
    expect(turns).toBeGreaterThan(1);
    expect(lb.fd.svc4).toBeGreaterThan(0);
    expect(lb.capacity.ct4Tcp).toBe(1024);
    expect(lb.prog('kbp_tc_pod')).toBeGreaterThan(0);
  });

  it('reports a load failure as an error naming bpf_object__load', async () => {
    const missing = `${pinPath}-bad`;
    await expect(
      loadPinnedObject({
        pinPath: missing,
        // Larger than any kernel allows a hash map: the map creation fails during the load.
        mapSizes: { ...bpfConfig().mapSizes, conntrack: 2 ** 31 },
        log: silentLogger,
      }),
    ).rejects.toThrow(/bpf_object__load/);
    rmSync(missing, { recursive: true, force: true });
  });
});
