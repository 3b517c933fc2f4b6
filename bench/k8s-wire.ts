// The two encodings an API server answers list and watch requests in, for the benchmark's own
// API server (bench/list-server.ts) and the decode cell (bench/decode-cost.ts): JSON as the API
// prints it, and Kubernetes' protobuf (the "k8s\0" envelope, length-prefixed watch frames) with
// the schemas the kube source decodes with. Encoding is the inverse of src/sources/protobuf.ts:
// IntOrString, Time, Quantity and FieldsV1 from their JSON forms back to their messages.

import protobuf from 'protobufjs';
import type { WatchedKind } from '../src/model/events.js';
import schema from '../src/sources/k8s-proto.json' with { type: 'json' };

const root = protobuf.Root.fromJSON(schema.root);
const META = 'k8s.io.apimachinery.pkg.apis.meta.v1';
const MAGIC = Buffer.from('k8s\0', 'latin1');
const unknownType = root.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown');
const watchEventType = root.lookupType(`${META}.WatchEvent`);

interface KindInfo {
  apiVersion: string;
  objectType: protobuf.Type;
  listType: protobuf.Type;
}

export const KINDS: Record<WatchedKind, KindInfo> = {
  Service: {
    apiVersion: 'v1',
    objectType: root.lookupType('k8s.io.api.core.v1.Service'),
    listType: root.lookupType('k8s.io.api.core.v1.ServiceList'),
  },
  EndpointSlice: {
    apiVersion: 'discovery.k8s.io/v1',
    objectType: root.lookupType('k8s.io.api.discovery.v1.EndpointSlice'),
    listType: root.lookupType('k8s.io.api.discovery.v1.EndpointSliceList'),
  },
  Node: {
    apiVersion: 'v1',
    objectType: root.lookupType('k8s.io.api.core.v1.Node'),
    listType: root.lookupType('k8s.io.api.core.v1.NodeList'),
  },
  ServiceCIDR: {
    apiVersion: 'networking.k8s.io/v1',
    objectType: root.lookupType('k8s.io.api.networking.v1.ServiceCIDR'),
    listType: root.lookupType('k8s.io.api.networking.v1.ServiceCIDRList'),
  },
};

/** A JSON-shaped value as the fields of `type` (what protobufjs' fromObject takes). */
function toProtoFields(type: protobuf.Type, value: unknown): unknown {
  switch (type.fullName) {
    case '.k8s.io.apimachinery.pkg.util.intstr.IntOrString':
      return typeof value === 'string' ? { type: 1, strVal: value } : { type: 0, intVal: value };
    case `.${META}.Time`:
    case `.${META}.MicroTime`: {
      const ms = Date.parse(String(value));
      return { seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 };
    }
    case '.k8s.io.apimachinery.pkg.api.resource.Quantity':
      return { string: String(value) };
    // managedFields' fieldsV1 is a JSON object in JSON and its JSON text in protobuf.
    case `.${META}.FieldsV1`:
      return { Raw: Buffer.from(JSON.stringify(value)) };
  }
  const json = value as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const field of type.fieldsArray) {
    const v = json[field.name];
    if (v === undefined || v === null) continue;
    const nested = field.resolvedType instanceof protobuf.Type ? field.resolvedType : null;
    const convert = (item: unknown) => (nested ? toProtoFields(nested, item) : item);
    if (field.map)
      out[field.name] = Object.fromEntries(
        Object.entries(v as object).map(([k, item]) => [k, convert(item)]),
      );
    else if (field.repeated) out[field.name] = (v as unknown[]).map(convert);
    else out[field.name] = convert(v);
  }
  return out;
}

function encodeMessage(type: protobuf.Type, json: unknown): Uint8Array {
  return type.encode(type.fromObject(toProtoFields(type, json) as Record<string, unknown>)).finish();
}

function envelope(apiVersion: string, kind: string, raw: Uint8Array): Buffer {
  const unknown = unknownType.fromObject({ typeMeta: { apiVersion, kind }, raw });
  return Buffer.concat([MAGIC, unknownType.encode(unknown).finish()]);
}

/** A list response body: `{metadata: {resourceVersion}, items}` in the encoding asked for. */
export function listBody(
  kind: WatchedKind,
  items: readonly object[],
  resourceVersion: string,
  encoding: 'json' | 'protobuf',
): Buffer {
  const { apiVersion, listType } = KINDS[kind];
  const list = { apiVersion, kind: `${kind}List`, metadata: { resourceVersion }, items };
  if (encoding === 'json') return Buffer.from(JSON.stringify(list));
  return envelope(apiVersion, `${kind}List`, encodeMessage(listType, list));
}

/** One watch event as the stream carries it: a JSON line, or a length-prefixed protobuf frame. */
export function watchEventBytes(
  kind: WatchedKind,
  type: 'ADDED' | 'MODIFIED' | 'DELETED',
  object: object,
  encoding: 'json' | 'protobuf',
): Buffer {
  if (encoding === 'json') return Buffer.from(`${JSON.stringify({ type, object })}\n`);
  const { apiVersion, objectType } = KINDS[kind];
  const raw = envelope(apiVersion, kind, encodeMessage(objectType, object));
  const event = watchEventType.encode(watchEventType.fromObject({ type, object: { raw } })).finish();
  const length = Buffer.alloc(4);
  length.writeUInt32BE(event.length);
  return Buffer.concat([length, event]);
}
