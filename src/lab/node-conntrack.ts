// What a node's netfilter conntrack holds of a flow: how tests and the cross-node bench tell a
// connection that went through the node's stack from one BPF host routing carried past it.

import type { IPFamily } from '../net/ip.js';
import type { Lab } from './netns.js';

/** The namespace's netfilter conntrack entries of TCP connections from `client` answered by `backend`. */
export async function tcpConntrackEntries(
  lab: Lab,
  ns: string,
  family: IPFamily,
  client: string,
  backend: string,
): Promise<number> {
  const f = family === 'IPv4' ? 'ipv4' : 'ipv6';
  const { stdout } = await lab.exec(ns, 'conntrack', [
    '-L',
    '-f',
    f,
    '-p',
    'tcp',
    '-s',
    client,
    '-r',
    backend,
  ]);
  return stdout.split('\n').filter((line) => line.trim() !== '').length;
}
