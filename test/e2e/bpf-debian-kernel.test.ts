import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildIpvsLab, IpvsLabGuest, PROJECT_ROOT } from '../support/ipvs-lab.js';
import { describeRoot } from '../support/privileges.js';

// The project's kernel floor is 5.10 and this machine runs 6.18, whose verifier accepts more than
// older ones (a back-edge in a loop, for one). Debian 12's 6.1 kernel, booted in the IPVS lab's
// virtual machine, loads the very objects the agent loads, with the agent's own libbpf bindings:
// bpf/lb.o (bpf_loop, which 6.1 has) and bpf/lb_compat.o (for kernels without it), the latter
// with the constants of a 5.10 kernel (precise clock, no bpf_set_retval).

const PROGRAMS = [
  'kbp_tc_pod',
  'kbp_tc_ext',
  'kbp_tc_ext_l3',
  'kbp_tc_egress',
  'kbp_tc_egress_l3',
  'kbp_xdp_ext',
  'kbp_xdp_tx',
  'kbp_sock4_connect',
  'kbp_sock4_sendmsg',
  'kbp_sock4_recvmsg',
  'kbp_sock4_getpeername',
  'kbp_sock6_connect',
  'kbp_sock6_sendmsg',
  'kbp_sock6_recvmsg',
  'kbp_sock6_getpeername',
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

  it('pass its verifier: every program of bpf/lb.o and bpf/lb_compat.o loads', async () => {
    const libbpf = (file: string) => JSON.stringify(join(PROJECT_ROOT, 'dist/native/libbpf', file));
    const layout = join(PROJECT_ROOT, 'dist/src/dataplanes/bpf/layout.js');
    const loader = join(PROJECT_ROOT, 'dist/src/dataplanes/bpf/object.js');
    const objects = [
      [join(PROJECT_ROOT, 'bpf/lb.o'), true],
      [join(PROJECT_ROOT, 'bpf/lb_compat.o'), false],
    ];
    // lb.o with the load-time constants the agent picks there (bpf_set_retval as the probe
    // finds it); lb_compat.o with 5.10's. Both with host routing (bpf_redirect_peer and
    // bpf_redirect_neigh are 5.10's), the most code the verifier can be shown.
    const script = [
      `const l = { ...(await import(${libbpf('constants.js')})), ...(await import(${libbpf('object.js')})), ...(await import(${libbpf('probe.js')})) };`,
      `const { rodata, RODATA_MAP } = await import(${JSON.stringify(layout)});`,
      `const { kernelHasBpfLoop } = await import(${JSON.stringify(loader)});`,
      'const sockSetRetval = l.helperSupported(l.BPF_PROG_TYPE_CGROUP_SOCK_ADDR, l.BPF_FUNC_SET_RETVAL);',
      'console.log("sockSetRetval", sockSetRetval);',
      'console.log("bpfLoop", kernelHasBpfLoop());',
      `for (const [path, modern] of ${JSON.stringify(objects)}) {`,
      'const o = l.openObject(path);',
      'l.setMapInitialValue(l.findMap(o, RODATA_MAP), rodata.encode(modern ? { coarseClock: true, sockSetRetval, hostRouting: true } : { coarseClock: false, sockSetRetval: false, hostRouting: true }));',
      'l.loadObject(o);',
      `for (const p of ${JSON.stringify(PROGRAMS)}) console.log(path.split("/").pop(), p, l.programFd(o, p) > 0);`,
      'l.closeObject(o); }',
    ].join(' ');
    const result = await guest!.sh(`uname -r\nnode --input-type=module -e '${script}'`, {
      timeoutMs: 120_000,
    });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const [kernel, setRetval, bpfLoop, ...programs] = result.stdout.trim().split('\n');
    expect(kernel).toMatch(/^6\.1\./);
    // 6.1 lets the cgroup socket-address hooks set the syscall's error (ECONNREFUSED).
    expect(setRetval).toBe('sockSetRetval true');
    // ... and has bpf_loop: the agent picks lb.o there.
    expect(bpfLoop).toBe('bpfLoop true');
    expect(programs).toEqual(
      ['lb.o', 'lb_compat.o'].flatMap((file) => PROGRAMS.map((name) => `${file} ${name} true`)),
    );
  });
});
