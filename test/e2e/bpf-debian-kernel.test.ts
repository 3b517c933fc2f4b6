import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildIpvsLab, IpvsLabGuest, PROJECT_ROOT } from '../support/ipvs-lab.js';
import { describeRoot } from '../support/privileges.js';

// The project's kernel floor is 5.10 and this machine runs 6.18, whose verifier accepts more than
// older ones (a back-edge in a loop, for one). Debian 12's 6.1 kernel, booted in the IPVS lab's
// virtual machine, loads the very object the agent loads, with the agent's own libbpf bindings.

const PROGRAMS = [
  'kbp_tc_pod',
  'kbp_tc_ext',
  'kbp_tc_ext_l3',
  'kbp_tc_egress',
  'kbp_tc_egress_l3',
  'kbp_xdp_ext',
  'kbp_xdp_tx',
  'kbp_sock_connect4',
  'kbp_sock_sendmsg4',
  'kbp_sock_recvmsg4',
  'kbp_sock_getpeername4',
];

describeRoot("the bpf programs on Debian 12's 6.1 kernel", () => {
  let guest: IpvsLabGuest | undefined;

  beforeAll(async () => {
    await buildIpvsLab();
    guest = await IpvsLabGuest.boot();
  }, 600_000);

  afterAll(async () => {
    await guest?.shutdown();
  });

  it('pass its verifier: every program of bpf/lb.o loads', async () => {
    const libbpf = join(PROJECT_ROOT, 'dist/native/libbpf.js');
    const layout = join(PROJECT_ROOT, 'dist/src/dataplanes/bpf/layout.js');
    const object = join(PROJECT_ROOT, 'bpf/lb.o');
    // With the load-time constants the agent picks there: bpf_set_retval as the probe finds it.
    const script = [
      `const l = await import(${JSON.stringify(libbpf)});`,
      `const { rodata, RODATA_MAP } = await import(${JSON.stringify(layout)});`,
      `const o = l.openObject(${JSON.stringify(object)});`,
      'const sockSetRetval = l.helperSupported(l.BPF_PROG_TYPE_CGROUP_SOCK_ADDR, l.BPF_FUNC_SET_RETVAL);',
      'console.log("sockSetRetval", sockSetRetval);',
      'l.setMapInitialValue(l.findMap(o, RODATA_MAP), rodata.encode({ coarseClock: true, sockSetRetval }));',
      'l.loadObject(o);',
      `for (const p of ${JSON.stringify(PROGRAMS)}) console.log(p, l.programFd(o, p) > 0);`,
      'l.closeObject(o);',
    ].join(' ');
    const result = await guest!.sh(`uname -r\nnode --input-type=module -e '${script}'`, {
      timeoutMs: 120_000,
    });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const [kernel, setRetval, ...programs] = result.stdout.trim().split('\n');
    expect(kernel).toMatch(/^6\.1\./);
    // 6.1 lets the cgroup socket-address hooks set the syscall's error (ECONNREFUSED).
    expect(setRetval).toBe('sockSetRetval true');
    expect(programs).toEqual(PROGRAMS.map((name) => `${name} true`));
  });
});
