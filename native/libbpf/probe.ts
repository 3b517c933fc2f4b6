// What this kernel and machine offer: helper probes and the number of possible CPUs.

import { check, f } from './bindings.js';

/** Whether programs of `progType` may call helper `helperId` on this kernel (libbpf loads a probe
 * program); an error (a kernel without the program type) reads as no. */
export function helperSupported(progType: number, helperId: number): boolean {
  return (f.probe_helper(progType, helperId, null) as number) === 1;
}

/** Number of possible CPUs: the multiplier of per-CPU map values. */
export function possibleCpus(): number {
  return check('libbpf_num_possible_cpus', f.num_possible_cpus() as number);
}
