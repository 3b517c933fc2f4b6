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
    const object = join(PROJECT_ROOT, 'bpf/lb.o');
    const script = [
      `const l = await import(${JSON.stringify(libbpf)});`,
      `const o = l.openObject(${JSON.stringify(object)});`,
      'l.loadObject(o);',
      `for (const p of ${JSON.stringify(PROGRAMS)}) console.log(p, l.programFd(o, p) > 0);`,
      'l.closeObject(o);',
    ].join(' ');
    const result = await guest!.sh(`uname -r\nnode --input-type=module -e '${script}'`, {
      timeoutMs: 120_000,
    });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const [kernel, ...programs] = result.stdout.trim().split('\n');
    expect(kernel).toMatch(/^6\.1\./);
    expect(programs).toEqual(PROGRAMS.map((name) => `${name} true`));
  });
});
