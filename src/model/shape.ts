// The quick shape checks of the two kinds a cluster holds by the thousand, Services and
// EndpointSlices: does a raw object pass every rule of its zod schema in parse.ts? Each check says
// yes only when it is sure, reading the raw object in place (no copy of it is made), and the
// parser then uses the raw object as the schema's output. Anything else, a malformed object or one
// the check is unsure of, goes through the zod schema, which words the problem: a "no" here is never
// a verdict. test/unit/parse-shape.test.ts holds each check to its schema on random, malformed and
// mutated objects (a check never says yes where the schema refuses, and the parsed model is the same).

import type { RawEndpointSlice, RawService } from './parse.js';
import {
  API_LIMITS,
  DNS1035_LABEL,
  DNS1123_LABEL,
  DNS1123_SUBDOMAIN,
  EMPTY_OR_DNS1123_LABEL,
  isLabelValue,
  qualifiedNameProblem,
} from './schema.js';

type Fields = Record<string, unknown>;

/** What z.object accepts: an object that is not a list. */
function isObject(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Absent, or JSON null (optional() is zod's nullish). */
const absent = (value: unknown): value is null | undefined => value === undefined || value === null;

const isText = (value: unknown, max: number): value is string =>
  typeof value === 'string' && value.length <= max;

const isName = (value: unknown, pattern: RegExp, max: number): value is string =>
  isText(value, max) && pattern.test(value);

const optText = (value: unknown, max: number) => absent(value) || isText(value, max);
const optAddress = (value: unknown) => optText(value, API_LIMITS.addressLength);
/** A list item is never absent: null is not a string. */
const isAddress = (value: unknown) => isText(value, API_LIMITS.addressLength);
const optName = (value: unknown, pattern: RegExp, max: number) =>
  absent(value) || isName(value, pattern, max);
const optOneOf = (value: unknown, values: readonly string[]) =>
  absent(value) || (typeof value === 'string' && values.includes(value));

const isInteger = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;
const optInteger = (value: unknown, min: number, max: number) => absent(value) || isInteger(value, min, max);

/** Absent, or a list of at most `max` items that each pass `item`. */
function optList(value: unknown, item: (entry: unknown) => boolean, max = Number.POSITIVE_INFINITY) {
  if (absent(value)) return true;
  if (!Array.isArray(value) || value.length > max) return false;
  for (const entry of value) if (!item(entry)) return false;
  return true;
}

/** A JSON object of string values (z.record also takes objects of other classes: left to it). */
function isStringRecord(value: unknown): value is Record<string, string> {
  if (!isObject(value)) return false;
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return false;
  for (const key in value) if (typeof value[key] !== 'string') return false;
  return true;
}

function optLabels(value: unknown): boolean {
  if (absent(value)) return true;
  if (!isStringRecord(value)) return false;
  for (const key in value) {
    if (qualifiedNameProblem(key) !== null || !isLabelValue(value[key] as string)) return false;
  }
  return true;
}

function optAnnotations(value: unknown): boolean {
  if (absent(value)) return true;
  if (!isStringRecord(value)) return false;
  let bytes = 0;
  for (const key in value) {
    if (qualifiedNameProblem(key) !== null) return false;
    bytes += Buffer.byteLength(key) + Buffer.byteLength(value[key] as string);
  }
  return bytes <= API_LIMITS.annotationsTotalBytes;
}

/** schema.ts namespacedMetadata with the kind's name rule. */
function isNamespacedMeta(value: unknown, name: RegExp, nameMax: number): boolean {
  return (
    isObject(value) &&
    isName(value.name, name, nameMax) &&
    optText(value.uid, 253) &&
    optText(value.resourceVersion, 253) &&
    optLabels(value.labels) &&
    optAnnotations(value.annotations) &&
    optText(value.deletionTimestamp, 64) &&
    isName(value.namespace, DNS1123_LABEL, 63)
  );
}

const PROTOCOLS = ['TCP', 'UDP', 'SCTP'];
const TRAFFIC_POLICIES = ['Cluster', 'Local'];
const optPortName = (value: unknown) => optName(value, EMPTY_OR_DNS1123_LABEL, 63);

// ---- Service ------------------------------------------------------------------------------------

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer', 'ExternalName'];

function optTargetPort(value: unknown): boolean {
  return (
    absent(value) ||
    isInteger(value, 1, 65535) ||
    (typeof value === 'string' && value.length >= 1 && value.length <= 15)
  );
}

function isServicePort(value: unknown): boolean {
  return (
    isObject(value) &&
    optPortName(value.name) &&
    optOneOf(value.protocol, PROTOCOLS) &&
    isInteger(value.port, 1, 65535) &&
    optTargetPort(value.targetPort) &&
    optInteger(value.nodePort, 0, 65535)
  );
}

function optAffinityConfig(value: unknown): boolean {
  if (absent(value)) return true;
  if (!isObject(value)) return false;
  const clientIP = value.clientIP;
  if (absent(clientIP)) return true;
  return isObject(clientIP) && optInteger(clientIP.timeoutSeconds, 1, 86400);
}

function optServiceSpec(spec: unknown): boolean {
  if (absent(spec)) return true;
  return (
    isObject(spec) &&
    optOneOf(spec.type, SERVICE_TYPES) &&
    optAddress(spec.clusterIP) &&
    optList(spec.clusterIPs, isAddress, API_LIMITS.clusterIPs) &&
    optList(spec.ports, isServicePort) &&
    optList(spec.externalIPs, isAddress) &&
    optList(spec.loadBalancerSourceRanges, isAddress) &&
    optOneOf(spec.externalTrafficPolicy, TRAFFIC_POLICIES) &&
    optOneOf(spec.internalTrafficPolicy, TRAFFIC_POLICIES) &&
    optOneOf(spec.sessionAffinity, ['None', 'ClientIP']) &&
    optAffinityConfig(spec.sessionAffinityConfig) &&
    optInteger(spec.healthCheckNodePort, 0, 65535)
  );
}

function isIngress(value: unknown): boolean {
  return (
    isObject(value) &&
    optAddress(value.ip) &&
    optAddress(value.hostname) &&
    optOneOf(value.ipMode, ['VIP', 'Proxy'])
  );
}

function optServiceStatus(status: unknown): boolean {
  if (absent(status)) return true;
  if (!isObject(status)) return false;
  const lb = status.loadBalancer;
  if (absent(lb)) return true;
  return isObject(lb) && optList(lb.ingress, isIngress);
}

/** Does the raw object pass parse.ts's serviceSchema as it is? (false: ask the schema) */
export function isServiceShape(raw: unknown): raw is RawService {
  return (
    isObject(raw) &&
    (absent(raw.kind) || raw.kind === 'Service') &&
    isNamespacedMeta(raw.metadata, DNS1035_LABEL, 63) &&
    optServiceSpec(raw.spec) &&
    optServiceStatus(raw.status)
  );
}

// ---- EndpointSlice ------------------------------------------------------------------------------

const ADDRESS_TYPES = ['IPv4', 'IPv6', 'FQDN'];

function isSlicePort(value: unknown): boolean {
  return (
    isObject(value) &&
    optPortName(value.name) &&
    optInteger(value.port, 0, 65535) &&
    optOneOf(value.protocol, PROTOCOLS)
  );
}

const optBool = (value: unknown) => absent(value) || typeof value === 'boolean';

function optConditions(value: unknown): boolean {
  if (absent(value)) return true;
  return isObject(value) && optBool(value.ready) && optBool(value.serving) && optBool(value.terminating);
}

const isHint = (value: unknown) => isObject(value) && isText(value.name, 253);

function optHints(value: unknown): boolean {
  if (absent(value)) return true;
  return (
    isObject(value) &&
    optList(value.forZones, isHint, API_LIMITS.hintsPerEndpoint) &&
    optList(value.forNodes, isHint, API_LIMITS.hintsPerEndpoint)
  );
}

function isEndpoint(value: unknown): boolean {
  return (
    isObject(value) &&
    optList(value.addresses, isAddress, API_LIMITS.endpointAddresses) &&
    optConditions(value.conditions) &&
    optName(value.nodeName, DNS1123_SUBDOMAIN, 253) &&
    optText(value.zone, 253) &&
    optHints(value.hints)
  );
}

/** Does the raw object pass parse.ts's endpointSliceSchema as it is? (false: ask the schema) */
export function isEndpointSliceShape(raw: unknown): raw is RawEndpointSlice {
  return (
    isObject(raw) &&
    (absent(raw.kind) || raw.kind === 'EndpointSlice') &&
    isNamespacedMeta(raw.metadata, DNS1123_SUBDOMAIN, 253) &&
    typeof raw.addressType === 'string' &&
    ADDRESS_TYPES.includes(raw.addressType) &&
    optList(raw.ports, isSlicePort, API_LIMITS.slicePorts) &&
    optList(raw.endpoints, isEndpoint, API_LIMITS.sliceEndpoints)
  );
}
