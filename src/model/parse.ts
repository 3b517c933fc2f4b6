// Validation of raw API objects (JSON-decoded, from the API server or a manifest file) into the typed
// model. It rejects what the API server would never store or kube-proxy cannot use, and applies the
// API server's defaulting kube-proxy relies on. Where kube-proxy skips one entry and keeps the rest
// of the object (an externalIP, a source range or an LB IP that does not parse; an endpoint without
// a usable address), so does the parser, and it reports what it left out. Addresses are checked
// the way kube-proxy parses them (sloppily: "010.1.2.3" is 10.1.2.3) and kept as written; the
// brain sorts them into families. The schemas' building blocks and the problems' wording are in
// schema.ts.

import { z } from 'zod';
import { parseCIDR, parseIP } from '../net/ip.js';
import type { SourceEvent, WatchedKind } from './events.js';
import {
  API_LIMITS,
  address,
  allocatedPort,
  type Built,
  bool,
  boundedText,
  describeValue,
  dns1035Label,
  dns1123Subdomain,
  type Issue,
  integer,
  isIP,
  keepUsable,
  kindIs,
  list,
  metadata,
  namespacedMetadata,
  object,
  oneOf,
  optional,
  port,
  portName,
  protocol,
  targetPort,
  toMeta,
  trafficPolicy,
  validate,
} from './schema.js';
import { isEndpointSliceShape, isServiceShape } from './shape.js';
import {
  type EndpointConditions,
  type EndpointPort,
  type EndpointSlice,
  type Node,
  SERVICE_NAME_LABEL,
  type Service,
  type ServiceCIDR,
  type ServicePort,
  type SliceEndpoint,
} from './types.js';

/** A valid object; `leftOut` names the entries dropped from it, when there were any. */
export type ParseResult<T> = { ok: true; value: T; leftOut?: string } | { ok: false; reason: string };

/** A skipped object, or entries left out of one, located well enough for a `file#doc Kind ns/name: reason` line. */
export interface ObjectProblem {
  /** "api", or "file.yaml#2" / "file.yaml#2.items[5]" for manifests. */
  origin: string;
  kind: string;
  namespace: string;
  name: string;
  reason: string;
  /** Only the entries the reason names were left out; the rest of the object is used. */
  entriesLeftOut?: boolean;
}

/** The API server's default for spec.sessionAffinityConfig.clientIP.timeoutSeconds. */
export const DEFAULT_CLIENT_IP_TIMEOUT_SECONDS = 10800;
const MAX_CLIENT_IP_TIMEOUT_SECONDS = 86400;
// ---- Service ------------------------------------------------------------------------------------

export const serviceSchema = object({
  kind: kindIs('Service'),
  metadata: namespacedMetadata(dns1035Label()),
  spec: optional(
    object({
      type: optional(oneOf(['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'])),
      clusterIP: optional(address()),
      clusterIPs: optional(list(address(), API_LIMITS.clusterIPs)),
      ports: optional(
        list(
          object({
            name: optional(portName()),
            protocol: optional(protocol()),
            port: port(),
            targetPort: optional(targetPort()),
            nodePort: optional(allocatedPort()),
          }),
        ),
      ),
      externalIPs: optional(list(address())),
      loadBalancerSourceRanges: optional(list(address())),
      externalTrafficPolicy: optional(trafficPolicy()),
      internalTrafficPolicy: optional(trafficPolicy()),
      sessionAffinity: optional(oneOf(['None', 'ClientIP'])),
      sessionAffinityConfig: optional(
        object({
          clientIP: optional(object({ timeoutSeconds: optional(integer(1, MAX_CLIENT_IP_TIMEOUT_SECONDS)) })),
        }),
      ),
      healthCheckNodePort: optional(allocatedPort()),
    }),
  ),
  status: optional(
    object({
      loadBalancer: optional(
        object({
          ingress: optional(
            list(
              object({
                ip: optional(address()),
                hostname: optional(address()),
                ipMode: optional(oneOf(['VIP', 'Proxy'])),
              }),
            ),
          ),
        }),
      ),
    }),
  ),
});

export type RawService = z.infer<typeof serviceSchema>;

/** Rules of the API server's Service validation that span fields and that kube-proxy's keys rely on. */
function serviceIssues(raw: RawService): Issue[] {
  const spec = raw.spec ?? {};
  const ports = spec.ports ?? [];
  const issues: Issue[] = [];
  const headless = spec.clusterIP === 'None';
  if (ports.length === 0 && !headless && spec.type !== 'ExternalName') {
    issues.push({
      path: ['spec', 'ports'],
      message: 'must hold at least one port (only headless and ExternalName services may have none)',
    });
  }
  const firstByName = new Map<string, number>();
  const firstByPort = new Map<string, number>();
  ports.forEach((p, i) => {
    const name = p.name ?? '';
    if (ports.length > 1 && name === '') {
      issues.push({
        path: ['spec', 'ports', i, 'name'],
        message: 'is required when the service has several ports',
      });
    }
    const sameName = firstByName.get(name);
    if (name !== '' && sameName !== undefined) {
      issues.push({
        path: ['spec', 'ports', i, 'name'],
        message: `duplicates spec.ports[${sameName}].name`,
        input: name,
      });
    }
    if (!firstByName.has(name)) firstByName.set(name, i);
    const portKey = `${p.port}/${p.protocol ?? 'TCP'}`;
    const samePort = firstByPort.get(portKey);
    if (samePort !== undefined) {
      issues.push({
        path: ['spec', 'ports', i],
        message: `duplicates port ${portKey} of spec.ports[${samePort}]`,
      });
    } else firstByPort.set(portKey, i);
  });
  // Every rule of the Service is keyed on its ClusterIP: one that does not parse leaves nothing to program.
  const clusterIP = spec.clusterIP ?? '';
  if (clusterIP !== '' && clusterIP !== 'None' && !isIP(clusterIP)) {
    issues.push({
      path: ['spec', 'clusterIP'],
      message: 'must be an IP address, "None" or ""',
      input: clusterIP,
    });
  }
  (spec.clusterIPs ?? []).forEach((ip, i) => {
    if (ip !== 'None' && !isIP(ip))
      issues.push({ path: ['spec', 'clusterIPs', i], message: 'must be an IP address or "None"', input: ip });
  });
  const first = spec.clusterIPs?.[0];
  if (spec.clusterIP && first !== undefined && first !== spec.clusterIP) {
    issues.push({
      path: ['spec', 'clusterIPs', 0],
      message: `must equal spec.clusterIP ${describeValue(spec.clusterIP)}`,
      input: first,
    });
  }
  return issues;
}

const notAnIP = (text: string): Issue | null =>
  isIP(text) ? null : { path: [], message: 'must be an IP address', input: text };

function toService(raw: RawService): Built<Service> {
  const spec = raw.spec ?? {};
  const sessionAffinity = spec.sessionAffinity ?? 'None';
  // kube-proxy skips, one by one, externalIPs and source ranges that do not parse (empty strings
  // without a word) and LB ingress IPs that do not parse, and programs the rest of the Service.
  const blank = (text: string) => text.trim() === '';
  const externalIPs = keepUsable(spec.externalIPs ?? [], ['spec', 'externalIPs'], notAnIP, blank);
  const sourceRanges = keepUsable(
    spec.loadBalancerSourceRanges ?? [],
    ['spec', 'loadBalancerSourceRanges'],
    (text) => (parseCIDR(text.trim()) ? null : { path: [], message: 'must be a CIDR', input: text }),
    blank,
  );
  const ingress = keepUsable(
    raw.status?.loadBalancer?.ingress ?? [],
    ['status', 'loadBalancer', 'ingress'],
    (entry) =>
      !entry.ip || isIP(entry.ip)
        ? null
        : { path: ['ip'], message: 'must be an IP address', input: entry.ip },
  );
  const ports: ServicePort[] = (spec.ports ?? []).map((p) => ({
    name: p.name ?? '',
    protocol: p.protocol ?? 'TCP',
    port: p.port,
    nodePort: p.nodePort ?? 0,
  }));
  const value: Service = {
    meta: toMeta(raw.metadata, raw.metadata.namespace),
    type: spec.type ?? 'ClusterIP',
    clusterIP: spec.clusterIP ?? '',
    clusterIPs: spec.clusterIPs ?? [],
    ports,
    externalIPs: externalIPs.kept,
    loadBalancerIngress: ingress.kept.map((entry) => ({
      ip: entry.ip ?? '',
      hostname: entry.hostname ?? '',
      ipMode: entry.ipMode ?? 'VIP',
    })),
    loadBalancerSourceRanges: sourceRanges.kept,
    externalTrafficPolicy: spec.externalTrafficPolicy ?? 'Cluster',
    internalTrafficPolicy: spec.internalTrafficPolicy ?? 'Cluster',
    sessionAffinity,
    sessionAffinityTimeoutSeconds:
      sessionAffinity === 'ClientIP'
        ? (spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_CLIENT_IP_TIMEOUT_SECONDS)
        : 0,
    healthCheckNodePort: spec.healthCheckNodePort ?? 0,
  };
  return { value, leftOut: [...externalIPs.leftOut, ...sourceRanges.leftOut, ...ingress.leftOut] };
}

export function parseService(raw: unknown): ParseResult<Service> {
  return validate(serviceSchema, raw, serviceIssues, toService, isServiceShape);
}

// ---- EndpointSlice ------------------------------------------------------------------------------

const hintList = () => optional(list(object({ name: boundedText(253) }), API_LIMITS.hintsPerEndpoint));

export const endpointSliceSchema = object({
  kind: kindIs('EndpointSlice'),
  metadata: namespacedMetadata(dns1123Subdomain()),
  addressType: oneOf(['IPv4', 'IPv6', 'FQDN']),
  ports: optional(
    list(
      object({
        // The API server defaults an absent name to "", so it matches the unnamed Service port.
        name: optional(portName()),
        // kube-proxy skips port 0 itself, so it is kept for the brain.
        port: optional(integer(0, 65535)),
        protocol: optional(protocol()),
      }),
      API_LIMITS.slicePorts,
    ),
  ),
  endpoints: optional(
    list(
      object({
        addresses: optional(list(address(), API_LIMITS.endpointAddresses)),
        conditions: optional(
          object({ ready: optional(bool()), serving: optional(bool()), terminating: optional(bool()) }),
        ),
        nodeName: optional(dns1123Subdomain()),
        zone: optional(boundedText(253)),
        hints: optional(object({ forZones: hintList(), forNodes: hintList() })),
      }),
      API_LIMITS.sliceEndpoints,
    ),
  ),
});

export type RawEndpointSlice = z.infer<typeof endpointSliceSchema>;

type RawEndpoint = NonNullable<RawEndpointSlice['endpoints']>[number];

/**
 * Why kube-proxy cannot use an endpoint of an IP slice, or null: it reads only addresses[0], skips an
 * endpoint without addresses, and in older versions skipped one of the other family (newer ones rely
 * on the API server, which refuses both, as it refuses an address that does not parse).
 */
function endpointProblem(endpoint: RawEndpoint, addressType: 'IPv4' | 'IPv6'): Issue | null {
  const first = endpoint.addresses?.[0];
  if (first === undefined) return { path: ['addresses'], message: 'must hold at least one address' };
  if (parseIP(first)?.family === addressType) return null;
  return {
    path: ['addresses', 0],
    message: `must be an ${addressType} address (addressType ${addressType})`,
    input: first,
  };
}

// Compact endpoints: a cluster has 10^5-10^6 of them and they differ in little but their addresses.
// Their conditions take one of 27 frozen records, empty hint lists one frozen array, and the
// strings they repeat (node names, zones) one copy each; the brain only reads them.

type Tristate = boolean | null;
const CONDITIONS = new Map<string, EndpointConditions>();

function sharedConditions(ready: Tristate, serving: Tristate, terminating: Tristate): EndpointConditions {
  const key = `${ready}${serving}${terminating}`;
  let conditions = CONDITIONS.get(key);
  if (!conditions) {
    conditions = Object.freeze({ ready, serving, terminating });
    CONDITIONS.set(key, conditions);
  }
  return conditions;
}

const NO_HINTS: string[] = Object.freeze([]) as unknown as string[];

/** Node names and zones seen, each kept once; a few thousand at most in the largest clusters. */
const nodeAndZoneNames = new Map<string, string>();
const MAX_INTERNED_NAMES = 100_000;

function interned(name: string | undefined): string | null {
  if (name === undefined) return null;
  const known = nodeAndZoneNames.get(name);
  if (known !== undefined) return known;
  // A bound, so that a source inventing names cannot grow the table for ever.
  if (nodeAndZoneNames.size < MAX_INTERNED_NAMES) nodeAndZoneNames.set(name, name);
  return name;
}

function hintNames(hints: readonly { name: string }[] | null | undefined): string[] {
  return hints && hints.length > 0 ? hints.map((h) => interned(h.name) ?? h.name) : NO_HINTS;
}

function toEndpointSlice(raw: RawEndpointSlice): Built<EndpointSlice> {
  const meta = toMeta(raw.metadata, raw.metadata.namespace);
  const { addressType } = raw;
  // FQDN slices are ignored whole (the brain says so); their addresses are names.
  const endpointsUsed =
    addressType === 'FQDN'
      ? { kept: raw.endpoints ?? [], leftOut: [] }
      : keepUsable(raw.endpoints ?? [], ['endpoints'], (e) => endpointProblem(e, addressType));
  const ports: EndpointPort[] = (raw.ports ?? []).map((p) => ({
    name: p.name ?? '',
    port: p.port ?? null,
    protocol: p.protocol ?? 'TCP',
  }));
  const endpoints: SliceEndpoint[] = endpointsUsed.kept.map((e) => ({
    addresses: e.addresses ?? [],
    conditions: sharedConditions(
      e.conditions?.ready ?? null,
      e.conditions?.serving ?? null,
      e.conditions?.terminating ?? null,
    ),
    nodeName: interned(e.nodeName ?? undefined),
    zone: interned(e.zone ?? undefined),
    zoneHints: hintNames(e.hints?.forZones),
    nodeHints: hintNames(e.hints?.forNodes),
  }));
  const value: EndpointSlice = {
    meta,
    serviceName: meta.labels[SERVICE_NAME_LABEL] ?? '',
    addressType,
    ports,
    endpoints,
  };
  return { value, leftOut: endpointsUsed.leftOut };
}

export function parseEndpointSlice(raw: unknown): ParseResult<EndpointSlice> {
  return validate(endpointSliceSchema, raw, () => [], toEndpointSlice, isEndpointSliceShape);
}

// ---- Node ---------------------------------------------------------------------------------------

const nodeSchema = object({
  kind: kindIs('Node'),
  metadata: metadata(dns1123Subdomain()),
  spec: optional(
    object({
      podCIDR: optional(address()),
      podCIDRs: optional(list(address(), API_LIMITS.podCIDRs)),
      taints: optional(
        list(object({ key: boundedText(317), value: optional(boundedText(63)), effect: boundedText(64) })),
      ),
    }),
  ),
  status: optional(
    object({ addresses: optional(list(object({ type: boundedText(64), address: address() }))) }),
  ),
});

type RawNode = z.infer<typeof nodeSchema>;

function toNode(raw: RawNode): Built<Node> {
  const spec = raw.spec ?? {};
  // The API server fills podCIDRs from the older single-valued podCIDR.
  const podCIDRs = spec.podCIDRs?.length ? spec.podCIDRs : spec.podCIDR ? [spec.podCIDR] : [];
  const value: Node = {
    meta: toMeta(raw.metadata, ''),
    podCIDRs,
    addresses: (raw.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
    taints: (spec.taints ?? []).map((t) => ({ key: t.key, value: t.value ?? '', effect: t.effect })),
    deletionTimestamp: raw.metadata.deletionTimestamp ?? null,
  };
  return { value, leftOut: [] };
}

export function parseNode(raw: unknown): ParseResult<Node> {
  return validate(nodeSchema, raw, () => [], toNode);
}

// ---- ServiceCIDR --------------------------------------------------------------------------------

const serviceCIDRSchema = object({
  kind: kindIs('ServiceCIDR'),
  metadata: metadata(dns1123Subdomain()),
  spec: optional(object({ cidrs: optional(list(address(), API_LIMITS.serviceCIDRs)) })),
});

type RawServiceCIDR = z.infer<typeof serviceCIDRSchema>;

/** The API server's rules: one or two CIDRs, and two only of different families. */
function serviceCIDRIssues(raw: RawServiceCIDR): Issue[] {
  const cidrs = raw.spec?.cidrs ?? [];
  if (cidrs.length === 0) return [{ path: ['spec', 'cidrs'], message: 'must hold at least one CIDR' }];
  const [first, second] = cidrs.map((cidr) => parseCIDR(cidr)?.family);
  if (first !== undefined && first === second) {
    return [
      {
        path: ['spec', 'cidrs', 1],
        message: 'must be of the other IP family than spec.cidrs[0] (at most one CIDR per family)',
        input: cidrs[1],
      },
    ];
  }
  return [];
}

function toServiceCIDR(raw: RawServiceCIDR): Built<ServiceCIDR> {
  // The API server never stores a CIDR that does not parse; kube-proxy would put one in its IPv6
  // proxier's rule (not IPv4 means IPv6 there), where nft refuses the whole transaction. It is
  // left out here and the object's other CIDR is used.
  const cidrs = keepUsable(raw.spec?.cidrs ?? [], ['spec', 'cidrs'], (text) =>
    parseCIDR(text) ? null : { path: [], message: 'must be a CIDR', input: text },
  );
  return { value: { meta: toMeta(raw.metadata, ''), cidrs: cidrs.kept }, leftOut: cidrs.leftOut };
}

export function parseServiceCIDR(raw: unknown): ParseResult<ServiceCIDR> {
  return validate(serviceCIDRSchema, raw, serviceCIDRIssues, toServiceCIDR);
}

// ---- the fields read ----------------------------------------------------------------------------

/**
 * The fields of a raw object the parser reads, by their JSON names: `true` for a value read as a
 * whole, else the fields read inside it (inside each item, for a list or a map). Derived from the
 * schemas above, so that a source that decodes only these (the protobuf source) cannot miss a
 * field the parser starts to read.
 */
export type FieldsRead = { readonly [name: string]: FieldsRead | true };

function fieldsReadBy(schema: z.ZodType): FieldsRead | true {
  if (schema instanceof z.ZodOptional || schema instanceof z.ZodNullable)
    return fieldsReadBy(schema.unwrap() as z.ZodType);
  if (schema instanceof z.ZodArray) return fieldsReadBy(schema.element as z.ZodType);
  if (schema instanceof z.ZodRecord) return fieldsReadBy(schema.valueType as z.ZodType);
  if (schema instanceof z.ZodObject)
    return Object.fromEntries(
      Object.entries(schema.shape).map(([name, field]) => [name, fieldsReadBy(field as z.ZodType)]),
    );
  return true;
}

const SCHEMAS: Record<WatchedKind, z.ZodType> = {
  Service: serviceSchema,
  EndpointSlice: endpointSliceSchema,
  Node: nodeSchema,
  ServiceCIDR: serviceCIDRSchema,
};

/** The fields either tree reads. */
function allFieldsRead(a: FieldsRead, b: FieldsRead): FieldsRead {
  const out: Record<string, FieldsRead | true> = { ...a };
  for (const [name, inner] of Object.entries(b)) {
    const known = out[name];
    out[name] = known === undefined || known === true || inner === true ? true : allFieldsRead(known, inner);
  }
  return out;
}

/** What describeObject reads of every kind, cluster-scoped ones included (their reports name a namespace given). */
const IDENTITY_READ: FieldsRead = { metadata: { namespace: true, name: true } };

/** By kind, the fields parseObject and describeObject read of a raw object. */
export const FIELDS_READ = Object.fromEntries(
  Object.entries(SCHEMAS).map(([kind, schema]) => [
    kind,
    allFieldsRead(fieldsReadBy(schema) as FieldsRead, IDENTITY_READ),
  ]),
) as Record<WatchedKind, FieldsRead>;

// ---- by kind ------------------------------------------------------------------------------------

export type ModelOf<K extends WatchedKind> = K extends 'Service'
  ? Service
  : K extends 'EndpointSlice'
    ? EndpointSlice
    : K extends 'ServiceCIDR'
      ? ServiceCIDR
      : Node;

export function parseObject<K extends WatchedKind>(kind: K, raw: unknown): ParseResult<ModelOf<K>> {
  switch (kind) {
    case 'Service':
      return parseService(raw) as ParseResult<ModelOf<K>>;
    case 'EndpointSlice':
      return parseEndpointSlice(raw) as ParseResult<ModelOf<K>>;
    case 'ServiceCIDR':
      return parseServiceCIDR(raw) as ParseResult<ModelOf<K>>;
    default:
      return parseNode(raw) as ParseResult<ModelOf<K>>;
  }
}

export type ParsedObject =
  | { kind: 'Service'; value: Service }
  | { kind: 'EndpointSlice'; value: EndpointSlice }
  | { kind: 'Node'; value: Node }
  | { kind: 'ServiceCIDR'; value: ServiceCIDR };

/** No valid name is longer (DNS subdomain); only longer, invalid ones are shortened in reports. */
const MAX_NAME_LENGTH = 253;

/**
 * Best-effort identity of a raw object, valid or not, for problem reports and for keying deletes.
 * A name that is not a string is "". Valid names are returned whole.
 */
export function describeObject(raw: unknown): { namespace: string; name: string } {
  const meta = typeof raw === 'object' && raw !== null ? (raw as { metadata?: unknown }).metadata : undefined;
  if (typeof meta !== 'object' || meta === null) return { namespace: '', name: '' };
  const { namespace, name } = meta as { namespace?: unknown; name?: unknown };
  const shown = (v: unknown) =>
    typeof v !== 'string' ? '' : v.length <= MAX_NAME_LENGTH ? v : `${v.slice(0, MAX_NAME_LENGTH)}…`;
  return { namespace: shown(namespace), name: shown(name) };
}

/**
 * Validates the object an event carries; a failure, or entries left out of a valid object, come
 * back as a located problem.
 */
export function parseEvent(
  event: SourceEvent,
): { ok: true; object: ParsedObject; problem?: ObjectProblem } | { ok: false; problem: ObjectProblem } {
  const result = parseObject(event.kind, event.object);
  const located = { origin: event.origin, kind: event.kind, ...describeObject(event.object) };
  if (!result.ok) return { ok: false, problem: { ...located, reason: result.reason } };
  const object = { kind: event.kind, value: result.value } as ParsedObject;
  if (result.leftOut === undefined) return { ok: true, object };
  return {
    ok: true,
    object,
    problem: {
      ...located,
      reason: `${result.leftOut} (left out; the rest of the ${event.kind} is used)`,
      entriesLeftOut: true,
    },
  };
}

/** `file#doc Kind ns/name: reason`, the line the CLI prints for a skipped object. */
export function formatProblem(problem: ObjectProblem): string {
  const who = [problem.namespace, problem.name].filter((part) => part !== '').join('/');
  const subject = [problem.origin, problem.kind, who].filter((part) => part !== '').join(' ');
  return `${subject}: ${problem.reason}`;
}
