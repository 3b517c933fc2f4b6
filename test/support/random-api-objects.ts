// Seeded random Services, EndpointSlices, Nodes and ServiceCIDRs as the JSON API prints them: good
// and malformed values (names, addresses, ports, enums, limits), pointer fields set to "" and
// fields the model does not read (managedFields, ownerReferences, status conditions...). A string
// field that is neither a pointer nor without omitempty in k8s.io/api is never "" here: the JSON
// API leaves those out. Every value has its field's protobuf type, so that both encodings carry it.

import type { WatchedKind } from '../../src/model/events.js';
import type { Raw } from './malformed-corpus.js';

type Rand = () => number;

const pick = <T>(rand: Rand, values: readonly T[]): T => values[Math.floor(rand() * values.length)] as T;
/** A good value, or now and then a bad one: most objects stay valid, most malformed ones have one fault. */
const choose = <T>(rand: Rand, good: readonly T[], bad: readonly T[]): T =>
  chance(rand, 0.06) ? pick(rand, bad) : pick(rand, good);
const chance = (rand: Rand, p: number) => rand() < p;
/** `value()` under `name` with probability p, else nothing. */
function maybe(rand: Rand, p: number, name: string, value: () => unknown): Raw {
  return chance(rand, p) ? { [name]: value() } : {};
}
function listOf<T>(rand: Rand, max: number, item: () => T): T[] {
  return Array.from({ length: Math.floor(rand() * (max + 1)) }, item);
}

const LONG = 'x'.repeat(300);
const NAMES = [
  ['web', 'db-1', 'a'],
  ['Bad_Name', '1abc', 'a.b', 'x'.repeat(64), LONG],
] as const;
const NAMESPACES = [
  ['demo', 'kube-system'],
  ['Bad NS', 'x'.repeat(64)],
] as const;
const IPS = [
  ['10.96.0.10', '10.244.1.5', '10.244.1.6', 'fd00::10', '010.96.0.1'],
  ['10.96.300.1', 'None', 'host.example', ' ', ''],
] as const;
const CIDRS = [
  ['10.96.0.0/16', 'fd00:96::/112', '10.97.0.0/16', ' 10.1.0.0/16 '],
  ['10.0.0.0/33', 'bogus', ''],
] as const;
const LABEL_KEYS = [
  ['app', 'kubernetes.io/service-name', 'service.kubernetes.io/headless'],
  ['bad key!', '/x', 'a/b/c'],
] as const;
const LABEL_VALUES = [
  ['web', 'db-1', ''],
  ['bad value!', 'x'.repeat(64), '-x'],
] as const;
type Pools = readonly [readonly string[], readonly string[]];
const from = (rand: Rand, [good, bad]: Pools) => choose(rand, good, bad);
const TIMES = ['2025-12-01T17:00:00Z', '2026-03-04T05:06:07Z'];

function stringMap(rand: Rand, keys: Pools, values: Pools): Raw {
  return Object.fromEntries(listOf(rand, 3, () => [from(rand, keys), from(rand, values)]));
}

function metadata(rand: Rand, namespaced: boolean): Raw {
  return {
    ...maybe(rand, 0.95, 'name', () => from(rand, NAMES)),
    ...maybe(rand, namespaced ? 0.95 : 0.05, 'namespace', () => from(rand, NAMESPACES)),
    ...maybe(rand, 0.7, 'uid', () => `uid-${Math.floor(rand() * 1e6)}`),
    ...maybe(rand, 0.9, 'resourceVersion', () => String(Math.floor(rand() * 1e6))),
    ...maybe(rand, 0.6, 'labels', () => stringMap(rand, LABEL_KEYS, LABEL_VALUES)),
    ...maybe(rand, 0.4, 'annotations', () =>
      stringMap(
        rand,
        [[...LABEL_KEYS[0], 'kubectl.kubernetes.io/last-applied-configuration'], LABEL_KEYS[1]],
        [['', 'true', LONG], ['']],
      ),
    ),
    ...maybe(rand, 0.1, 'deletionTimestamp', () => pick(rand, TIMES)),
    // Never read: skipped by the protobuf decoder, ignored by the parser.
    ...maybe(rand, 0.5, 'creationTimestamp', () => pick(rand, TIMES)),
    ...maybe(rand, 0.3, 'generation', () => Math.floor(rand() * 100)),
    ...maybe(rand, 0.3, 'finalizers', () => ['kubernetes.io/protect']),
    ...maybe(rand, 0.3, 'ownerReferences', () => [
      { apiVersion: 'v1', kind: 'Service', name: 'web', uid: 'u-1', controller: true },
    ]),
    ...maybe(rand, 0.4, 'managedFields', () => [
      {
        manager: 'kube-controller-manager',
        operation: 'Update',
        apiVersion: 'v1',
        time: pick(rand, TIMES),
        fieldsType: 'FieldsV1',
        fieldsV1: {},
      },
    ]),
  };
}

const conditions = (rand: Rand) =>
  listOf(rand, 2, () => ({
    type: 'Ready',
    status: pick(rand, ['True', 'False']),
    lastTransitionTime: pick(rand, TIMES),
    reason: pick(rand, ['', 'Ok']),
    message: '',
  }));

function service(rand: Rand): Raw {
  const port = () => ({
    ...maybe(rand, 0.7, 'name', () => choose(rand, ['http', 'dns'], ['Bad', 'x'.repeat(64)])),
    ...maybe(rand, 0.8, 'protocol', () => choose(rand, ['TCP', 'UDP', 'SCTP'], ['ICMP'])),
    ...maybe(rand, 0.95, 'port', () => choose(rand, [80, 53, 8080], [0, -1, 70000])),
    ...maybe(rand, 0.8, 'targetPort', () => choose(rand, [8080, 'http'], [0, 70000, '', 'x'.repeat(16)])),
    ...maybe(rand, 0.4, 'nodePort', () => choose(rand, [30080, 0], [70000])),
    ...maybe(rand, 0.2, 'appProtocol', () => 'http'),
  });
  return {
    metadata: metadata(rand, true),
    ...maybe(rand, 0.95, 'spec', () => ({
      ...maybe(rand, 0.8, 'type', () =>
        choose(rand, ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'], ['Bogus']),
      ),
      ...maybe(rand, 0.8, 'clusterIP', () => choose(rand, IPS[0], ['10.96.300.1', 'None', 'host.example'])),
      ...maybe(rand, 0.6, 'clusterIPs', () => listOf(rand, 3, () => from(rand, IPS))),
      ...maybe(rand, 0.9, 'ports', () => listOf(rand, 3, port)),
      ...maybe(rand, 0.3, 'externalIPs', () => listOf(rand, 3, () => from(rand, IPS))),
      ...maybe(rand, 0.3, 'loadBalancerSourceRanges', () => listOf(rand, 3, () => from(rand, CIDRS))),
      ...maybe(rand, 0.4, 'externalTrafficPolicy', () => choose(rand, ['Cluster', 'Local'], ['Bogus'])),
      ...maybe(rand, 0.4, 'internalTrafficPolicy', () => choose(rand, ['Cluster', 'Local'], ['Bogus', ''])),
      ...maybe(rand, 0.5, 'sessionAffinity', () => choose(rand, ['None', 'ClientIP'], ['Bogus'])),
      ...maybe(rand, 0.3, 'sessionAffinityConfig', () => ({
        ...maybe(rand, 0.8, 'clientIP', () =>
          maybe(rand, 0.8, 'timeoutSeconds', () => choose(rand, [60, 10800], [0, 100000])),
        ),
      })),
      ...maybe(rand, 0.2, 'healthCheckNodePort', () => choose(rand, [30500, 0], [70000])),
      ...maybe(rand, 0.5, 'ipFamilies', () => ['IPv4']),
      ...maybe(rand, 0.3, 'selector', () => ({ app: 'web' })),
    })),
    ...maybe(rand, 0.4, 'status', () => ({
      loadBalancer: maybe(rand, 0.8, 'ingress', () =>
        listOf(rand, 2, () => ({
          ...maybe(rand, 0.7, 'ip', () => choose(rand, IPS[0], ['10.96.300.1', 'None', 'host.example'])),
          ...maybe(rand, 0.3, 'hostname', () => 'lb.example'),
          ...maybe(rand, 0.4, 'ipMode', () => choose(rand, ['VIP', 'Proxy'], ['', 'Bogus'])),
        })),
      ),
      ...maybe(rand, 0.3, 'conditions', () => conditions(rand)),
    })),
  };
}

function endpointSlice(rand: Rand): Raw {
  const hints = () => listOf(rand, 9, () => ({ name: choose(rand, ['zone-a', 'node-a'], ['', LONG]) }));
  const endpoint = () => ({
    ...maybe(rand, 0.9, 'addresses', () => listOf(rand, 2, () => from(rand, IPS))),
    ...maybe(rand, 0.8, 'conditions', () => ({
      ...maybe(rand, 0.8, 'ready', () => chance(rand, 0.7)),
      ...maybe(rand, 0.6, 'serving', () => chance(rand, 0.7)),
      ...maybe(rand, 0.6, 'terminating', () => chance(rand, 0.3)),
    })),
    ...maybe(rand, 0.6, 'nodeName', () => choose(rand, ['node-a', 'node-b'], ['', 'Bad_Node'])),
    ...maybe(rand, 0.4, 'zone', () => pick(rand, ['zone-a', ''])),
    ...maybe(rand, 0.3, 'hints', () => ({
      ...maybe(rand, 0.8, 'forZones', hints),
      ...maybe(rand, 0.5, 'forNodes', hints),
    })),
    ...maybe(rand, 0.3, 'targetRef', () => ({ kind: 'Pod', namespace: 'demo', name: 'web-0', uid: 'p-1' })),
  });
  return {
    metadata: metadata(rand, true),
    ...maybe(rand, 0.95, 'addressType', () => choose(rand, ['IPv4', 'IPv4', 'IPv6', 'FQDN'], ['', 'Bogus'])),
    ...maybe(rand, 0.8, 'ports', () =>
      listOf(rand, 3, () => ({
        ...maybe(rand, 0.7, 'name', () => choose(rand, ['http', 'dns', ''], ['Bad'])),
        ...maybe(rand, 0.8, 'port', () => choose(rand, [8080, 53, 0], [-1, 70000])),
        ...maybe(rand, 0.7, 'protocol', () => choose(rand, ['TCP', 'UDP'], ['', 'ICMP'])),
        ...maybe(rand, 0.2, 'appProtocol', () => 'http'),
      })),
    ),
    ...maybe(rand, 0.9, 'endpoints', () => listOf(rand, 4, endpoint)),
  };
}

function node(rand: Rand): Raw {
  return {
    metadata: metadata(rand, false),
    ...maybe(rand, 0.8, 'spec', () => ({
      ...maybe(rand, 0.5, 'podCIDR', () => choose(rand, CIDRS[0], ['10.0.0.0/33', 'bogus'])),
      ...maybe(rand, 0.5, 'podCIDRs', () => listOf(rand, 3, () => from(rand, CIDRS))),
      ...maybe(rand, 0.4, 'taints', () =>
        listOf(rand, 2, () => ({
          ...maybe(rand, 0.9, 'key', () =>
            choose(rand, ['node.kubernetes.io/not-ready'], ['', 'x'.repeat(320)]),
          ),
          ...maybe(rand, 0.5, 'value', () => choose(rand, ['v'], ['x'.repeat(64)])),
          ...maybe(rand, 0.9, 'effect', () => choose(rand, ['NoSchedule', 'NoExecute'], [''])),
        })),
      ),
      ...maybe(rand, 0.2, 'unschedulable', () => true),
      ...maybe(rand, 0.2, 'providerID', () => 'kind://docker/node'),
    })),
    ...maybe(rand, 0.8, 'status', () => ({
      ...maybe(rand, 0.8, 'addresses', () =>
        listOf(rand, 3, () => ({
          ...maybe(rand, 0.9, 'type', () => choose(rand, ['InternalIP', 'Hostname'], [''])),
          ...maybe(rand, 0.9, 'address', () => from(rand, IPS)),
        })),
      ),
      ...maybe(rand, 0.3, 'capacity', () => ({ cpu: '2', memory: '8Gi' })),
      ...maybe(rand, 0.3, 'nodeInfo', () => ({ kubeletVersion: 'v1.37.2', architecture: 'amd64' })),
    })),
  };
}

function serviceCIDR(rand: Rand): Raw {
  return {
    metadata: metadata(rand, false),
    ...maybe(rand, 0.9, 'spec', () =>
      maybe(rand, 0.9, 'cidrs', () => listOf(rand, 3, () => from(rand, CIDRS))),
    ),
    ...maybe(rand, 0.4, 'status', () => ({ conditions: conditions(rand) })),
  };
}

const MAKERS: Record<WatchedKind, (rand: Rand) => Raw> = {
  Service: service,
  EndpointSlice: endpointSlice,
  Node: node,
  ServiceCIDR: serviceCIDR,
};

/** One random object of `kind`, as the JSON API prints it. */
export function randomApiObject(kind: WatchedKind, rand: Rand): Raw {
  return MAKERS[kind](rand);
}
