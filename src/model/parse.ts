// Validation of raw API objects (JSON-decoded, from the API server or a manifest file) into the typed
// model. It rejects what the API server would never store or kube-proxy cannot use, and applies the
// API server's defaulting kube-proxy relies on. Where kube-proxy skips one entry and keeps the rest
// of the object (an externalIP, a source range or an LB IP that does not parse; an endpoint without
// a usable address), so does the parser, and it reports what it left out. Addresses are checked
// the way kube-proxy parses them (sloppily: "010.1.2.3" is 10.1.2.3) and kept as written; the
// brain sorts them into families.

import { z } from 'zod';
import { parseCIDR, parseIP } from '../net/ip.js';
import type { SourceEvent, WatchedKind } from './events.js';
import {
  type EndpointConditions,
  type EndpointPort,
  type EndpointSlice,
  type Node,
  type ObjectMeta,
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

/** Limits enforced by the API server's validation; an object beyond them can only come from a broken source. */
export const API_LIMITS = {
  sliceEndpoints: 1000,
  slicePorts: 100,
  endpointAddresses: 100,
  hintsPerEndpoint: 8,
  clusterIPs: 2,
  podCIDRs: 2,
  serviceCIDRs: 2,
  annotationsTotalBytes: 256 * 1024,
  /** No IP, CIDR or DNS name is longer; bounds every address-like string without parsing it. */
  addressLength: 253,
} as const;

/** The API server's default for spec.sessionAffinityConfig.clientIP.timeoutSeconds. */
export const DEFAULT_CLIENT_IP_TIMEOUT_SECONDS = 10800;
const MAX_CLIENT_IP_TIMEOUT_SECONDS = 86400;
/** Reasons list this many problems of one object, then a count of the rest. */
const MAX_LISTED_PROBLEMS = 3;

// ---- leaves -------------------------------------------------------------------------------------

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const EMPTY_OR_DNS1123_LABEL = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

const text = () => z.string({ error: 'must be a string' });
const bool = () => z.boolean({ error: 'must be true or false' });

function boundedText(max: number) {
  return text().max(max, { error: `must be at most ${max} characters`, abort: true });
}

/** An IP, CIDR or hostname kept as a string; its syntax is the brain's business. */
const address = () => boundedText(API_LIMITS.addressLength);

function dnsName(pattern: RegExp, max: number, description: string) {
  return boundedText(max).regex(pattern, { error: `must be ${description}` });
}
const DNS1123_LABEL_RULE =
  'a DNS label: lower-case letters, digits and "-", starting and ending alphanumeric';
const dns1123Label = () => dnsName(DNS1123_LABEL, 63, DNS1123_LABEL_RULE);
const dns1035Label = () =>
  dnsName(DNS1035_LABEL, 63, 'a DNS-1035 label: lower-case letters, digits and "-", starting with a letter');
const dns1123Subdomain = () =>
  dnsName(DNS1123_SUBDOMAIN, 253, 'a DNS subdomain: lower-case alphanumeric labels joined by "."');
/** A Service or EndpointSlice port name: a DNS label, or "" for the unnamed port. */
const portName = () => dnsName(EMPTY_OR_DNS1123_LABEL, 63, DNS1123_LABEL_RULE);

function integer(min: number, max: number, message = `must be an integer ${min}-${max}`) {
  return z
    .number({ error: message })
    .int({ error: message })
    .min(min, { error: message })
    .max(max, { error: message });
}
const port = () => integer(1, 65535);
/** nodePort and healthCheckNodePort: 0 (or absent) means not allocated. */
const allocatedPort = () => integer(0, 65535, 'must be an integer 1-65535, or 0 for none');

function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: `must be one of ${values.join(', ')}` });
}
const protocol = () => oneOf(['TCP', 'UDP', 'SCTP']);
const trafficPolicy = () => oneOf(['Cluster', 'Local']);

function object<S extends z.ZodRawShape>(shape: S) {
  return z.object(shape, { error: 'must be an object' });
}

function list<T extends z.ZodType>(item: T, max?: number) {
  const items = z.array(item, { error: 'must be a list' });
  return max === undefined ? items : items.max(max, { error: `must hold at most ${max} items` });
}

/** Go decodes JSON null into a zero value, so null means absent, as the API server treats it. */
function optional<T extends z.ZodType>(schema: T) {
  return schema.nullish();
}

const targetPort = () =>
  z.custom<number | string>(
    (value) =>
      (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535) ||
      (typeof value === 'string' && value.length >= 1 && value.length <= 15),
    { error: 'must be a port number 1-65535 or a port name of at most 15 characters' },
  );

// ---- metadata -----------------------------------------------------------------------------------

function qualifiedNameProblem(key: string): string | null {
  const slash = key.indexOf('/');
  const prefix = slash >= 0 ? key.slice(0, slash) : null;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== null && (prefix.length > 253 || !DNS1123_SUBDOMAIN.test(prefix))) {
    return 'must have a DNS subdomain prefix before "/"';
  }
  if (name.length > 63 || !QUALIFIED_NAME_PART.test(name)) {
    return 'must be a qualified name: at most 63 alphanumerics, "-", "_" or ".", starting and ending alphanumeric, with an optional DNS subdomain prefix and "/"';
  }
  return null;
}

function isLabelValue(value: string): boolean {
  return value === '' || (value.length <= 63 && QUALIFIED_NAME_PART.test(value));
}

const labels = () =>
  z.record(z.string(), text(), { error: 'must be an object' }).superRefine((map, ctx) => {
    for (const [key, value] of Object.entries(map)) {
      const keyProblem = qualifiedNameProblem(key);
      if (keyProblem !== null)
        ctx.addIssue({ code: 'custom', path: [key], message: `key ${keyProblem}`, input: key });
      else if (!isLabelValue(value)) {
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message:
            'must be a label value: at most 63 alphanumerics, "-", "_" or ".", starting and ending alphanumeric',
          input: value,
        });
      }
    }
  });

const annotations = () =>
  z.record(z.string(), text(), { error: 'must be an object' }).superRefine((map, ctx) => {
    let bytes = 0;
    for (const [key, value] of Object.entries(map)) {
      const keyProblem = qualifiedNameProblem(key);
      if (keyProblem !== null)
        ctx.addIssue({ code: 'custom', path: [key], message: `key ${keyProblem}`, input: key });
      bytes += Buffer.byteLength(key) + Buffer.byteLength(value);
    }
    if (bytes > API_LIMITS.annotationsTotalBytes) {
      ctx.addIssue({
        code: 'custom',
        path: [],
        message: `must total at most ${API_LIMITS.annotationsTotalBytes} bytes of keys and values`,
        input: bytes,
      });
    }
  });

function metadata(name: z.ZodType<string>) {
  return object({
    name,
    uid: optional(boundedText(253)),
    resourceVersion: optional(boundedText(253)),
    labels: optional(labels()),
    annotations: optional(annotations()),
    deletionTimestamp: optional(boundedText(64)),
  });
}

/** Namespaced objects must name their namespace (manifest sources default it to "default", like kubectl). */
const namespacedMetadata = (name: z.ZodType<string>) => metadata(name).extend({ namespace: dns1123Label() });

type RawMeta = z.infer<ReturnType<typeof metadata>>;

/** Cluster-scoped objects get namespace ""; whatever a manifest says there is ignored, as kubectl does. */
function toMeta(raw: RawMeta, namespace: string): ObjectMeta {
  return {
    namespace,
    name: raw.name,
    uid: raw.uid ?? '',
    resourceVersion: raw.resourceVersion ?? '',
    labels: raw.labels ?? {},
    annotations: raw.annotations ?? {},
  };
}

const kindIs = (kind: WatchedKind) => optional(z.literal(kind, { error: `must be ${kind}` }));

// ---- issues and their wording -------------------------------------------------------------------

interface Issue {
  path: readonly PropertyKey[];
  message: string;
  input?: unknown;
}

function fromZod(issues: readonly z.core.$ZodIssue[]): Issue[] {
  return issues.map((issue) => {
    // JSON has no undefined: an undefined input is a missing field.
    const missing = issue.code !== 'custom' && issue.input === undefined;
    if (missing) return { path: issue.path, message: 'is required' };
    return 'input' in issue
      ? { path: issue.path, message: issue.message, input: issue.input }
      : { path: issue.path, message: issue.message };
  });
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
const SHOWN_STRING_LENGTH = 40;

function shortString(value: string): string {
  if (value.length <= SHOWN_STRING_LENGTH) return JSON.stringify(value);
  return `${JSON.stringify(`${value.slice(0, SHOWN_STRING_LENGTH)}…`)} (${value.length} characters)`;
}

/** "spec.ports[1].port", 'metadata.labels["app.kubernetes.io/name"]'. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else if (typeof key === 'string' && IDENTIFIER.test(key)) out += out === '' ? key : `.${key}`;
    else out += `[${shortString(String(key))}]`;
  }
  return out;
}

/** A short description of a bad value for error messages: never the whole of a huge value. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return shortString(value);
  if (Array.isArray(value)) return value.length === 0 ? 'an empty list' : `a list of ${value.length} items`;
  if (typeof value === 'object') return 'an object';
  return String(value);
}

function formatIssue(issue: Issue): string {
  const got = 'input' in issue ? `, got ${describeValue(issue.input)}` : '';
  const where = formatPath(issue.path);
  return where === '' ? `${issue.message}${got}` : `${where}: ${issue.message}${got}`;
}

function formatIssues(issues: readonly Issue[]): string {
  const shown = issues.slice(0, MAX_LISTED_PROBLEMS).map(formatIssue).join('; ');
  const rest = issues.length - MAX_LISTED_PROBLEMS;
  return rest > 0 ? `${shown} (and ${rest} more)` : shown;
}

/** What `build` made of a valid object, and the entries it left out of it. */
interface Built<T> {
  value: T;
  leftOut: Issue[];
}

function validate<S extends z.ZodType, T>(
  schema: S,
  raw: unknown,
  check: (value: z.infer<S>) => Issue[],
  build: (value: z.infer<S>) => Built<T>,
): ParseResult<T> {
  const parsed = schema.safeParse(raw, { reportInput: true });
  if (!parsed.success) return { ok: false, reason: formatIssues(fromZod(parsed.error.issues)) };
  const issues = check(parsed.data);
  if (issues.length > 0) return { ok: false, reason: formatIssues(issues) };
  const { value, leftOut } = build(parsed.data);
  return leftOut.length > 0 ? { ok: true, value, leftOut: formatIssues(leftOut) } : { ok: true, value };
}

// ---- addresses, parsed as kube-proxy parses them ------------------------------------------------

const isIP = (text: string) => parseIP(text) !== null;

/**
 * The entries of a list that `usable` accepts; the others become issues at `path`, except the ones
 * `silent` picks (kube-proxy drops those without a word).
 */
function keepUsable<T>(
  entries: readonly T[],
  path: readonly PropertyKey[],
  usable: (entry: T) => Issue | null,
  silent: (entry: T) => boolean = () => false,
): { kept: T[]; leftOut: Issue[] } {
  const kept: T[] = [];
  const leftOut: Issue[] = [];
  entries.forEach((entry, i) => {
    if (silent(entry)) return;
    const issue = usable(entry);
    if (issue === null) kept.push(entry);
    else leftOut.push({ ...issue, path: [...path, i, ...issue.path] });
  });
  return { kept, leftOut };
}

// ---- Service ------------------------------------------------------------------------------------

const serviceSchema = object({
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

type RawService = z.infer<typeof serviceSchema>;

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
  return validate(serviceSchema, raw, serviceIssues, toService);
}

// ---- EndpointSlice ------------------------------------------------------------------------------

const hintList = () => optional(list(object({ name: boundedText(253) }), API_LIMITS.hintsPerEndpoint));

const endpointSliceSchema = object({
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

type RawEndpointSlice = z.infer<typeof endpointSliceSchema>;

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
  return validate(endpointSliceSchema, raw, () => [], toEndpointSlice);
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
