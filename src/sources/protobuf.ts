// Kubernetes' protobuf wire format, as kube-proxy speaks it (clientConnection.contentType): a list
// body is the magic "k8s\0" followed by a runtime.Unknown whose raw bytes are the list message; a
// watch stream is a sequence of frames, each a 4-byte big-endian length and a metav1.WatchEvent
// whose object carries the same magic and envelope. Decoded objects take the shape the JSON API
// gives them (field names are the JSON names in generated.proto), so model/parse.ts reads both.
// The schemas come from k8s.io/api's generated.proto files (scripts/k8s-proto.mjs).

import protobuf from 'protobufjs';
import type { WatchedKind } from '../model/events.js';
import schema from './k8s-proto.json' with { type: 'json' };

export const PROTOBUF_CONTENT_TYPE = 'application/vnd.kubernetes.protobuf';
const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]);
/** A watch frame longer than this is a corrupt stream, not an object (etcd's own limit is 1.5 MiB). */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;

const root = protobuf.Root.fromJSON(schema.root);
const META = 'k8s.io.apimachinery.pkg.apis.meta.v1';
const unknownType = root.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown');
/** The string fields of the watched kinds whose JSON has no omitempty: "" stays, as the JSON API prints it. */
const KEEP_EMPTY_STRINGS = new Set(
  ['type', 'status', 'reason', 'message'].map((f) => `.${META}.Condition.${f}`),
);
const watchEventType = root.lookupType(`${META}.WatchEvent`);
const statusType = root.lookupType(`${META}.Status`);
const LIST_TYPES: Record<WatchedKind, protobuf.Type> = {
  Service: root.lookupType('k8s.io.api.core.v1.ServiceList'),
  EndpointSlice: root.lookupType('k8s.io.api.discovery.v1.EndpointSliceList'),
  Node: root.lookupType('k8s.io.api.core.v1.NodeList'),
  ServiceCIDR: root.lookupType('k8s.io.api.networking.v1.ServiceCIDRList'),
};
const OBJECT_TYPES: Record<WatchedKind, protobuf.Type> = {
  Service: root.lookupType('k8s.io.api.core.v1.Service'),
  EndpointSlice: root.lookupType('k8s.io.api.discovery.v1.EndpointSlice'),
  Node: root.lookupType('k8s.io.api.core.v1.Node'),
  ServiceCIDR: root.lookupType('k8s.io.api.networking.v1.ServiceCIDR'),
};
const INT_OR_STRING = '.k8s.io.apimachinery.pkg.util.intstr.IntOrString';
const TIMES = new Set([`.${META}.Time`, `.${META}.MicroTime`]);
const QUANTITY = '.k8s.io.apimachinery.pkg.api.resource.Quantity';

export function isProtobuf(contentType: string | undefined): boolean {
  return (contentType ?? '').split(';')[0]?.trim() === PROTOBUF_CONTENT_TYPE;
}

/** The Unknown inside a "k8s\0"-prefixed body: its type and the raw bytes of the object. */
function unwrap(body: Uint8Array): { apiVersion: string; kind: string; raw: Uint8Array } {
  if (body.length < MAGIC.length || !MAGIC.equals(body.subarray(0, MAGIC.length)))
    throw new Error('protobuf body does not start with the k8s\\0 magic');
  const unknown = unknownType.decode(body.subarray(MAGIC.length)) as unknown as {
    typeMeta?: { apiVersion?: string; kind?: string };
    raw?: Uint8Array;
  };
  return {
    apiVersion: unknown.typeMeta?.apiVersion ?? '',
    kind: unknown.typeMeta?.kind ?? '',
    raw: unknown.raw ?? new Uint8Array(),
  };
}

/** metav1.Time as the JSON API prints it: RFC 3339, whole seconds (MicroTime: microseconds). */
function timeText(message: protobuf.Message, micro: boolean): string {
  const { seconds = 0, nanos = 0 } = message as unknown as {
    seconds?: number | protobuf.Long;
    nanos?: number;
  };
  const ms = Number(seconds) * 1000 + Math.floor(nanos / 1e6);
  const iso = new Date(ms).toISOString();
  return micro
    ? `${iso.slice(0, 19)}.${String(Math.floor(nanos / 1000)).padStart(6, '0')}Z`
    : `${iso.slice(0, 19)}Z`;
}

/** A decoded message as the JSON API would give it: only the fields present, int64 as numbers. */
function toApiJson(type: protobuf.Type, message: protobuf.Message): unknown {
  if (type.fullName === INT_OR_STRING) {
    const v = message as unknown as { type?: number | protobuf.Long; intVal?: number; strVal?: string };
    return Number(v.type ?? 0) === 1 ? (v.strVal ?? '') : (v.intVal ?? 0);
  }
  if (TIMES.has(type.fullName)) return timeText(message, type.name === 'MicroTime');
  if (type.fullName === QUANTITY) return (message as unknown as { string?: string }).string ?? '';
  const out: Record<string, unknown> = {};
  for (const field of type.fieldsArray) {
    if (!Object.hasOwn(message, field.name)) continue;
    const value = (message as unknown as Record<string, unknown>)[field.name];
    const convert = (v: unknown): unknown => {
      if (field.resolvedType instanceof protobuf.Type)
        return toApiJson(field.resolvedType, v as protobuf.Message);
      if (protobuf.util.isInteger(v) || typeof v !== 'object' || v === null) return v;
      // int64 fields decode to Long objects when long.js is around.
      if ('low' in v && 'high' in v) return Number(v);
      if (v instanceof Uint8Array) return Buffer.from(v).toString('base64');
      return v;
    };
    // Empty lists and maps are absent in JSON (omitempty); the decoder gives every one of them.
    if (field.map) {
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length > 0) out[field.name] = Object.fromEntries(entries.map(([k, v]) => [k, convert(v)]));
    } else if (field.repeated) {
      if ((value as unknown[]).length > 0) out[field.name] = (value as unknown[]).map(convert);
    } else if (value !== '' || KEEP_EMPTY_STRINGS.has(`${type.fullName}.${field.name}`)) {
      // Kubernetes' marshallers write every non-pointer string field, empty ones too (a ClusterIP
      // Service's externalTrafficPolicy is ""); the JSON API leaves them out (omitempty).
      out[field.name] = convert(value);
    }
  }
  return out;
}

function decodeAs(type: protobuf.Type, raw: Uint8Array): Record<string, unknown> {
  return toApiJson(type, type.decode(raw)) as Record<string, unknown>;
}

/**
 * A protobuf list response body as the JSON list it stands for ({metadata, items}). A list's items
 * have no omitempty: an empty list is `items: []` in JSON, not absent like other empty lists.
 */
export function decodeList(kind: WatchedKind, body: Uint8Array): unknown {
  const { raw } = unwrap(body);
  return { items: [], ...decodeAs(LIST_TYPES[kind], raw) };
}

/** One watch event: the object of the watched kind, or a Status for ERROR events. */
export function decodeWatchEvent(kind: WatchedKind, frame: Uint8Array): { type: string; object: unknown } {
  const event = watchEventType.decode(frame) as unknown as { type?: string; object?: { raw?: Uint8Array } };
  const type = event.type ?? '';
  const inner = unwrap(event.object?.raw ?? new Uint8Array());
  const objectType = inner.kind === 'Status' || type === 'ERROR' ? statusType : OBJECT_TYPES[kind];
  return { type, object: decodeAs(objectType, inner.raw) };
}

/** Splits a protobuf watch stream into its frames, whatever the chunk boundaries. */
export class WatchFrameReader {
  private pending: Buffer = Buffer.alloc(0);

  /** The complete frames the stream holds after `chunk`. Throws on a frame length no object has. */
  push(chunk: Buffer): Buffer[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const frames: Buffer[] = [];
    while (this.pending.length >= 4) {
      const length = this.pending.readUInt32BE(0);
      if (length > MAX_FRAME_BYTES) throw new Error(`watch frame of ${length} bytes`);
      if (this.pending.length < 4 + length) break;
      frames.push(this.pending.subarray(4, 4 + length));
      this.pending = this.pending.subarray(4 + length);
    }
    return frames;
  }
}
