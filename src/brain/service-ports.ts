// A Service's ports as one IP family's proxier sees them (pkg/proxy/serviceport.go,
// servicechangetracker.go, pkg/proxy/util ShouldSkipService): which services are skipped, the
// per-family ClusterIP, family-filtered externalIPs / LB IPs / source ranges, and the policies.

import type { IPFamily, Service } from '../model/types.js';
import { canonicalIPOfFamily, formatCIDR, parseCIDR } from '../net/ip.js';
import type { ServicePortInfo } from './types.js';

export const SCHEDULER_ANNOTATION = 'kube-bpf-proxy.io/scheduler';

/** ShouldSkipService: headless and ExternalName services get no rules. Returns the reason, or null. */
export function skipReason(service: Service): string | null {
  if (service.type === 'ExternalName') return 'ExternalName service';
  if (service.clusterIP === '' || service.clusterIP === 'None') return 'headless service (no ClusterIP)';
  return null;
}

/** ServicePortName.String(). */
export function servicePortNameString(namespace: string, name: string, portName: string): string {
  return portName === '' ? `${namespace}/${name}` : `${namespace}/${name}:${portName}`;
}

/** GetClusterIPByFamily: the first clusterIPs entry of the family, else clusterIP if it matches. */
export function clusterIPForFamily(service: Service, family: IPFamily): string | null {
  if (service.clusterIPs.length > 0) {
    for (const ip of service.clusterIPs) {
      const canonical = canonicalIPOfFamily(ip, family);
      if (canonical) return canonical;
    }
    return null;
  }
  return canonicalIPOfFamily(service.clusterIP, family);
}

function ipsOfFamily(values: string[], family: IPFamily): string[] {
  const out: string[] = [];
  for (const value of values) {
    const canonical = canonicalIPOfFamily(value, family);
    if (canonical) out.push(canonical);
  }
  return out;
}

function sourceRangesOfFamily(values: string[], family: IPFamily): string[] {
  const out: string[] = [];
  for (const value of values) {
    const cidr = parseCIDR(value.trim());
    if (cidr && cidr.family === family) out.push(formatCIDR(cidr));
  }
  return out;
}

/** The service's ports for one family; empty when the service is skipped or has no ClusterIP of the family. */
export function servicePortsForFamily(service: Service, family: IPFamily): ServicePortInfo[] {
  if (skipReason(service)) return [];
  const clusterIP = clusterIPForFamily(service, family);
  if (!clusterIP) return [];
  const { namespace, name } = service.meta;
  const externalIPs = ipsOfFamily(service.externalIPs, family);
  const loadBalancerIPs = ipsOfFamily(
    service.loadBalancerIngress
      .filter((ingress) => ingress.ip !== '' && ingress.ipMode !== 'Proxy')
      .map((ingress) => ingress.ip),
    family,
  );
  const loadBalancerSourceRanges = sourceRangesOfFamily(service.loadBalancerSourceRanges, family);
  const externalPolicyLocal =
    (service.type === 'NodePort' || service.type === 'LoadBalancer') &&
    service.externalTrafficPolicy === 'Local';
  const internalPolicyLocal = service.internalTrafficPolicy === 'Local';
  const needsHealthCheck = service.type === 'LoadBalancer' && service.externalTrafficPolicy === 'Local';
  const sessionAffinityTimeoutSeconds =
    service.sessionAffinity === 'ClientIP' ? service.sessionAffinityTimeoutSeconds : 0;

  return service.ports.map((port) => {
    const externallyAccessible = port.nodePort !== 0 || loadBalancerIPs.length > 0 || externalIPs.length > 0;
    return {
      family,
      namespace,
      name,
      portName: port.name,
      protocol: port.protocol,
      servicePortName: servicePortNameString(namespace, name, port.name),
      type: service.type,
      clusterIP,
      port: port.port,
      nodePort: port.nodePort,
      externalIPs,
      loadBalancerIPs,
      loadBalancerSourceRanges,
      healthCheckNodePort: needsHealthCheck ? service.healthCheckNodePort : 0,
      externalPolicyLocal,
      internalPolicyLocal,
      externallyAccessible,
      usesClusterEndpoints: !internalPolicyLocal || externallyAccessible,
      usesLocalEndpoints: internalPolicyLocal || (externalPolicyLocal && externallyAccessible),
      sessionAffinityTimeoutSeconds,
      schedulerAnnotation: service.meta.annotations[SCHEDULER_ANNOTATION] ?? null,
    };
  });
}
