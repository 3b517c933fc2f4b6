// The building blocks of the model's parsers (parse.ts): zod schemas for the API's leaves (names,
// ports, protocols, addresses) and for object metadata, the API server's limits, and the wording
// of a problem: which field, what it held, what it must be.

import { z } from 'zod';
import { parseIP } from '../net/ip.js';
import type { WatchedKind } from './events.js';
import type { ParseResult } from './parse.js';
import type { ObjectMeta } from './types.js';

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

/** Reasons list this many problems of one object, then a count of the rest. */
export const MAX_LISTED_PROBLEMS = 3;

// ---- leaves -------------------------------------------------------------------------------------

export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
export const EMPTY_OR_DNS1123_LABEL = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$/;
export const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
export const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

export const text = () => z.string({ error: 'must be a string' });
export const bool = () => z.boolean({ error: 'must be true or false' });

export function boundedText(max: number) {
  return text().max(max, { error: `must be at most ${max} characters`, abort: true });
}

/** An IP, CIDR or hostname kept as a string; its syntax is the brain's business. */
export const address = () => boundedText(API_LIMITS.addressLength);

export function dnsName(pattern: RegExp, max: number, description: string) {
  return boundedText(max).regex(pattern, { error: `must be ${description}` });
}
export const DNS1123_LABEL_RULE =
  'a DNS label: lower-case letters, digits and "-", starting and ending alphanumeric';
export const dns1123Label = () => dnsName(DNS1123_LABEL, 63, DNS1123_LABEL_RULE);
export const dns1035Label = () =>
  dnsName(DNS1035_LABEL, 63, 'a DNS-1035 label: lower-case letters, digits and "-", starting with a letter');
export const dns1123Subdomain = () =>
  dnsName(DNS1123_SUBDOMAIN, 253, 'a DNS subdomain: lower-case alphanumeric labels joined by "."');
/** A Service or EndpointSlice port name: a DNS label, or "" for the unnamed port. */
export const portName = () => dnsName(EMPTY_OR_DNS1123_LABEL, 63, DNS1123_LABEL_RULE);

export function integer(min: number, max: number, message = `must be an integer ${min}-${max}`) {
  return z
    .number({ error: message })
    .int({ error: message })
    .min(min, { error: message })
    .max(max, { error: message });
}
export const port = () => integer(1, 65535);
/** nodePort and healthCheckNodePort: 0 (or absent) means not allocated. */
export const allocatedPort = () => integer(0, 65535, 'must be an integer 1-65535, or 0 for none');

export function oneOf<const T extends readonly [string, ...string[]]>(values: T) {
  return z.enum(values, { error: `must be one of ${values.join(', ')}` });
}
export const protocol = () => oneOf(['TCP', 'UDP', 'SCTP']);
export const trafficPolicy = () => oneOf(['Cluster', 'Local']);

export function object<S extends z.ZodRawShape>(shape: S) {
  return z.object(shape, { error: 'must be an object' });
}

export function list<T extends z.ZodType>(item: T, max?: number) {
  const items = z.array(item, { error: 'must be a list' });
  return max === undefined ? items : items.max(max, { error: `must hold at most ${max} items` });
}

/** Go decodes JSON null into a zero value, so null means absent, as the API server treats it. */
export function optional<T extends z.ZodType>(schema: T) {
  return schema.nullish();
}

export const targetPort = () =>
  z.custom<number | string>(
    (value) =>
      (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= 65535) ||
      (typeof value === 'string' && value.length >= 1 && value.length <= 15),
    { error: 'must be a port number 1-65535 or a port name of at most 15 characters' },
  );

// ---- metadata -----------------------------------------------------------------------------------

export function qualifiedNameProblem(key: string): string | null {
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

export function isLabelValue(value: string): boolean {
  return value === '' || (value.length <= 63 && QUALIFIED_NAME_PART.test(value));
}

export const labels = () =>
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

export const annotations = () =>
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

export function metadata(name: z.ZodType<string>) {
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
export const namespacedMetadata = (name: z.ZodType<string>) =>
  metadata(name).extend({ namespace: dns1123Label() });

export type RawMeta = z.infer<ReturnType<typeof metadata>>;

/** Cluster-scoped objects get namespace ""; whatever a manifest says there is ignored, as kubectl does. */
export function toMeta(raw: RawMeta, namespace: string): ObjectMeta {
  return {
    namespace,
    name: raw.name,
    uid: raw.uid ?? '',
    resourceVersion: raw.resourceVersion ?? '',
    labels: raw.labels ?? {},
    annotations: raw.annotations ?? {},
  };
}

export const kindIs = (kind: WatchedKind) => optional(z.literal(kind, { error: `must be ${kind}` }));

// ---- issues and their wording -------------------------------------------------------------------

export interface Issue {
  path: readonly PropertyKey[];
  message: string;
  input?: unknown;
}

export function fromZod(issues: readonly z.core.$ZodIssue[]): Issue[] {
  return issues.map((issue) => {
    // JSON has no undefined: an undefined input is a missing field.
    const missing = issue.code !== 'custom' && issue.input === undefined;
    if (missing) return { path: issue.path, message: 'is required' };
    return 'input' in issue
      ? { path: issue.path, message: issue.message, input: issue.input }
      : { path: issue.path, message: issue.message };
  });
}

export const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const SHOWN_STRING_LENGTH = 40;

export function shortString(value: string): string {
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

export function formatIssue(issue: Issue): string {
  const got = 'input' in issue ? `, got ${describeValue(issue.input)}` : '';
  const where = formatPath(issue.path);
  return where === '' ? `${issue.message}${got}` : `${where}: ${issue.message}${got}`;
}

export function formatIssues(issues: readonly Issue[]): string {
  const shown = issues.slice(0, MAX_LISTED_PROBLEMS).map(formatIssue).join('; ');
  const rest = issues.length - MAX_LISTED_PROBLEMS;
  return rest > 0 ? `${shown} (and ${rest} more)` : shown;
}

/** What `build` made of a valid object, and the entries it left out of it. */
export interface Built<T> {
  value: T;
  leftOut: Issue[];
}

/**
 * The schema's output, then the rules across fields, then the model. `fits` (shape.ts), when given,
 * is asked first: a raw object it is sure of is used as the schema's output without zod's copy of
 * it (the parse of a 10,000-Service list spent most of its time in that copy and its collection).
 */
export function validate<S extends z.ZodType, T>(
  schema: S,
  raw: unknown,
  check: (value: z.infer<S>) => Issue[],
  build: (value: z.infer<S>) => Built<T>,
  fits?: (raw: unknown) => raw is z.infer<S>,
): ParseResult<T> {
  let data: z.infer<S>;
  if (fits?.(raw)) data = raw;
  else {
    const parsed = schema.safeParse(raw, { reportInput: true });
    if (!parsed.success) return { ok: false, reason: formatIssues(fromZod(parsed.error.issues)) };
    data = parsed.data;
  }
  const issues = check(data);
  if (issues.length > 0) return { ok: false, reason: formatIssues(issues) };
  const { value, leftOut } = build(data);
  return leftOut.length > 0 ? { ok: true, value, leftOut: formatIssues(leftOut) } : { ok: true, value };
}

// ---- addresses, parsed as kube-proxy parses them ------------------------------------------------

export const isIP = (text: string) => parseIP(text) !== null;

/**
 * The entries of a list that `usable` accepts; the others become issues at `path`, except the ones
 * `silent` picks (kube-proxy drops those without a word).
 */
export function keepUsable<T>(
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
