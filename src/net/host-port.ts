// host:port handling with Go's net.SplitHostPort rules, which kube-proxy uses on its bind addresses.

import { joinHostPort, parseIP } from './ip.js';

export function splitHostPort(text: string): { host: string; port: string } | null {
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0 || text[close + 1] !== ':') return null;
    const host = text.slice(1, close);
    const port = text.slice(close + 2);
    if (port.includes(':') || port.includes('[') || port.includes(']')) return null;
    return { host, port };
  }
  const colon = text.lastIndexOf(':');
  if (colon < 0) return null;
  const host = text.slice(0, colon);
  if (host.includes(':') || host.includes('[') || host.includes(']')) return null;
  return { host, port: text.slice(colon + 1) };
}

/** kube-proxy's AppendPortIfNeeded: a bare IP gets the default port; anything else is left for validation. */
export function appendPortIfNeeded(address: string, port: number): string {
  if (splitHostPort(address)) return address;
  return parseIP(address) ? joinHostPort(address, port) : address;
}
