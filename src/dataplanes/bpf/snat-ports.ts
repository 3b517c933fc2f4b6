// The SNAT source ports the bpf programs use, kept away from the node's own connections: the
// range goes into net.ipv4.ip_local_reserved_ports while the agent runs and is put back on close.

import { type PortReservation, reservePorts } from '../../host/reserved-ports.js';
import type { Logger } from '../../logger.js';

/** SNAT source ports: above Linux's default ephemeral range (32768-60999), and reserved in
 * net.ipv4.ip_local_reserved_ports while the agent runs, so the node's own connections never take
 * one whatever its ip_local_port_range (docs/bpf-datapath.md, "SNAT ports"). */
export const SNAT_PORT_RANGE = { min: 61000, max: 65535 } as const;

/** Where the agent records the ip_local_reserved_ports value it replaced (beside the names file). */
export function reservedPortsStatePath(namesFile: string): string {
  return `${namesFile.replace(/\.names\.json$/, '')}.reserved-ports.json`;
}

/** The SNAT range into net.ipv4.ip_local_reserved_ports; null (and a warning) when it cannot be. */
export function reserveSnatPorts(namesFile: string, log: Logger): PortReservation | null {
  try {
    const reservation = reservePorts(
      [SNAT_PORT_RANGE.min, SNAT_PORT_RANGE.max],
      reservedPortsStatePath(namesFile),
    );
    log.info({ ipLocalReservedPorts: reservation.value }, 'SNAT ports reserved');
    return reservation;
  } catch (err) {
    log.warn(
      { err: String(err), range: `${SNAT_PORT_RANGE.min}-${SNAT_PORT_RANGE.max}` },
      'cannot reserve the SNAT ports in net.ipv4.ip_local_reserved_ports: host connections may collide with SNATed flows',
    );
    return null;
  }
}

/** Puts back the ip_local_reserved_ports value that reserveSnatPorts replaced. */
export function releaseSnatPorts(reservation: PortReservation | null, log: Logger): void {
  try {
    reservation?.release();
  } catch (err) {
    log.warn({ err: String(err) }, 'cannot restore net.ipv4.ip_local_reserved_ports');
  }
}
