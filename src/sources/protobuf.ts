// Kubernetes' protobuf wire format, as kube-proxy speaks it (clientConnection.contentType): a list
// body is the magic "k8s\0" followed by a runtime.Unknown whose raw bytes are the list message; a
// watch stream is a sequence of frames, each a 4-byte big-endian length and a metav1.WatchEvent
// whose object carries the same magic and envelope. The schemas come from k8s.io/api's
// generated.proto files (scripts/k8s-proto.mjs).
//
// Objects are decoded straight into the shape the JSON API gives them (field names are the JSON
// names in generated.proto), and only the fields the model's parser reads (FIELDS_READ): the
// others (managedFields, status conditions, most of the metadata and of the spec) are skipped by
// wire type without being materialised. Each message is read by a MessageReader built once from
// the schema, which looks up the numbers of the fields read by their names.

import protobuf from 'protobufjs';
import type { WatchedKind } from '../model/events.js';
import { FIELDS_READ, type FieldsRead } from '../model/parse.js';
import schema from './k8s-proto.json' with { type: 'json' };

export const PROTOBUF_CONTENT_TYPE = 'application/vnd.kubernetes.protobuf';
const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]);
/** A watch frame longer than this is a corrupt stream, not an object (etcd's own limit is 1.5 MiB). */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;

const root = protobuf.Root.fromJSON(schema.root);
root.resolveAll();
const META = 'k8s.io.apimachinery.pkg.apis.meta.v1';
const CORE = 'k8s.io.api.core.v1';
const DISCOVERY = 'k8s.io.api.discovery.v1';

/**
 * The string fields read whose empty value the JSON API prints: pointers (`*string`) and fields
 * without omitempty in k8s.io/api's types.go. Kubernetes' marshaller writes every non-pointer
 * string on the wire, empty ones too, and the JSON API leaves those out (omitempty): an empty
 * string anywhere else decodes to an absent field, as the JSON API prints it.
 */
const PRINTED_WHEN_EMPTY = new Set([
  `${DISCOVERY}.EndpointSlice.addressType`,
  `${DISCOVERY}.EndpointPort.name`,
  `${DISCOVERY}.EndpointPort.protocol`,
  `${DISCOVERY}.Endpoint.nodeName`,
  `${DISCOVERY}.Endpoint.zone`,
  `${DISCOVERY}.ForZone.name`,
  `${DISCOVERY}.ForNode.name`,
  `${CORE}.ServiceSpec.internalTrafficPolicy`,
  `${CORE}.LoadBalancerIngress.ipMode`,
  `${CORE}.Taint.key`,
  `${CORE}.Taint.effect`,
  `${CORE}.NodeAddress.type`,
  `${CORE}.NodeAddress.address`,
  `${META}.WatchEvent.type`,
]);

/** How one field read is decoded; fields not read have none and are skipped. */
interface FieldReader {
  name: string;
  wireType: number;
  shape: 'single' | 'list' | 'map';
  /** One value (of a map: one entry's value). */
  read: (reader: protobuf.Reader) => unknown;
  /** A map entry without a value holds the type's default. */
  missing: () => unknown;
  keepEmpty: boolean;
}

interface MessageReader {
  name: string;
  /** By field number. */
  fields: (FieldReader | undefined)[];
  /** Makes this message's objects (plainObjectMaker). */
  Decoded: new () => Fields;
  /** The names of its list fields read. */
  lists: string[];
  /** The JSON API's scalar form of IntOrString, Time and Quantity. */
  finish?: (fields: Record<string, unknown>) => unknown;
}

const WIRE_LENGTH_DELIMITED = 2;
const toNumber = (long: protobuf.Long | number, unsigned: boolean) =>
  protobuf.util.LongBits.from(long).toNumber(unsigned);

/** Reads one scalar of each protobuf type but string (repeatingStringReader); int64s as numbers, bytes as a view of the body. */
const SCALARS: Record<string, (reader: protobuf.Reader) => unknown> = {
  double: (r) => r.double(),
  float: (r) => r.float(),
  int32: (r) => r.int32(),
  uint32: (r) => r.uint32(),
  sint32: (r) => r.sint32(),
  fixed32: (r) => r.fixed32(),
  sfixed32: (r) => r.sfixed32(),
  int64: (r) => toNumber(r.int64(), false),
  uint64: (r) => toNumber(r.uint64(), true),
  sint64: (r) => toNumber(r.sint64(), false),
  fixed64: (r) => toNumber(r.fixed64(), true),
  sfixed64: (r) => toNumber(r.sfixed64(), false),
  bool: (r) => r.bool(),
  bytes: (r) => r.bytes(),
};

/** The longest string a string reader remembers: names and addresses, not annotation values. */
const MAX_REMEMBERED_LENGTH = 64;

/**
 * A string field's reader, which gives its last string back when the same ASCII bytes come again:
 * the values objects repeat (namespaces, protocols, port and node names) are then one string each
 * in memory, as JSON.parse makes them, instead of a copy per object.
 */
function repeatingStringReader(): (reader: protobuf.Reader) => string {
  let last = '';
  return (reader) => {
    const start = reader.pos;
    const length = reader.uint32();
    const from = reader.pos;
    if (length === last.length && from + length <= reader.len) {
      const bytes = reader.buf;
      let i = 0;
      for (; i < length; i++) {
        const code = last.charCodeAt(i);
        if (code >= 0x80 || bytes[from + i] !== code) break;
      }
      if (i === length) {
        reader.pos = from + length;
        return last;
      }
    }
    reader.pos = start;
    const text = reader.string();
    if (text.length <= MAX_REMEMBERED_LENGTH) last = text;
    return text;
  };
}

/** metav1.Time as the JSON API prints it: RFC 3339, whole seconds (MicroTime: microseconds). */
function timeText(seconds: number, nanos: number, micro: boolean): string {
  const iso = new Date(seconds * 1000 + Math.floor(nanos / 1e6)).toISOString();
  return micro
    ? `${iso.slice(0, 19)}.${String(Math.floor(nanos / 1000)).padStart(6, '0')}Z`
    : `${iso.slice(0, 19)}Z`;
}

type Fields = Record<string, unknown>;
/** Messages the JSON API prints as scalars: read whole, into that scalar. */
const SCALAR_MESSAGES: Record<string, { fields: FieldsRead; finish: (fields: Fields) => unknown }> = {
  '.k8s.io.apimachinery.pkg.util.intstr.IntOrString': {
    fields: { type: true, intVal: true, strVal: true },
    finish: (f) => (f.type === 1 ? (f.strVal ?? '') : (f.intVal ?? 0)),
  },
  [`.${META}.Time`]: {
    fields: { seconds: true, nanos: true },
    finish: (f) => timeText(Number(f.seconds ?? 0), Number(f.nanos ?? 0), false),
  },
  [`.${META}.MicroTime`]: {
    fields: { seconds: true, nanos: true },
    finish: (f) => timeText(Number(f.seconds ?? 0), Number(f.nanos ?? 0), true),
  },
  '.k8s.io.apimachinery.pkg.api.resource.Quantity': {
    fields: { string: true },
    finish: (f) => f.string ?? '',
  },
};

/** The fields read of the message in reader's bytes up to `end`, in the JSON API's shape. */
function readMessage(message: MessageReader, reader: protobuf.Reader, end: number): unknown {
  const out = new message.Decoded();
  while (reader.pos < end) {
    const tag = reader.uint32();
    const field = message.fields[tag >>> 3];
    if (field === undefined) {
      reader.skipType(tag & 7);
      continue;
    }
    if ((tag & 7) !== field.wireType)
      throw new Error(`${message.name}.${field.name} has wire type ${tag & 7}, not ${field.wireType}`);
    if (field.shape === 'single') {
      const value = field.read(reader);
      if (value !== '' || field.keepEmpty) out[field.name] = value;
    } else if (field.shape === 'list') {
      const list = out[field.name] as unknown[] | undefined;
      if (list) list.push(field.read(reader));
      else out[field.name] = [field.read(reader)];
    } else {
      let map = out[field.name] as Fields | undefined;
      if (!map) {
        map = {};
        out[field.name] = map;
      }
      readMapEntry(field, reader, map);
    }
  }
  if (reader.pos !== end) throw new Error(`${message.name} runs past the end of its bytes`);
  // A list grows by half again and 16 more; a copy fits it, as JSON.parse's lists are.
  for (const name of message.lists) {
    const list = out[name] as unknown[] | undefined;
    if (list !== undefined && list.length > 1) out[name] = list.slice();
  }
  return message.finish ? message.finish(out) : out;
}

/** A map entry is a message of key (field 1, a string here) and value (field 2). */
function readMapEntry(field: FieldReader, reader: protobuf.Reader, map: Fields): void {
  const end = reader.uint32() + reader.pos;
  let key = '';
  let value = field.missing();
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === ((1 << 3) | WIRE_LENGTH_DELIMITED)) key = reader.string();
    else if (tag === ((2 << 3) | field.wireType)) value = field.read(reader);
    else reader.skipType(tag & 7);
  }
  if (reader.pos !== end) throw new Error(`an entry of ${field.name} runs past the end of its bytes`);
  // JSON.parse makes "__proto__" an own key; an assignment would set the prototype instead.
  if (key === '__proto__') Object.defineProperty(map, key, { value, enumerable: true, writable: true });
  else map[key] = value;
}

/**
 * A constructor of plain objects for one message: V8 fits the objects one constructor makes to the
 * fields they get (slack tracking), as JSON.parse fits its objects, where each `{}` keeps room for
 * four fields whatever it gets. Its prototype is Object's, so the objects are plain.
 */
function plainObjectMaker(): new () => Fields {
  function Decoded() {}
  Decoded.prototype = Object.prototype;
  return Decoded as unknown as new () => Fields;
}

/** The reader of `type` for the fields of it that `read` names; names without a field are not in this message. */
function messageReader(
  type: protobuf.Type,
  read: FieldsRead,
  finish?: MessageReader['finish'],
): MessageReader {
  const fields: (FieldReader | undefined)[] = [];
  for (const [name, inner] of Object.entries(read)) {
    // An object's kind and apiVersion are in the envelope, not in its message.
    const field = type.fields[name];
    if (field === undefined) continue;
    const valueType = field.resolvedType;
    let wireType: number;
    let readValue: FieldReader['read'];
    let missing: FieldReader['missing'];
    if (valueType instanceof protobuf.Type) {
      const scalar = inner === true ? SCALAR_MESSAGES[valueType.fullName] : undefined;
      if (inner === true && scalar === undefined)
        throw new Error(`the parser reads ${type.name}.${name} whole, and protobuf has it as a message`);
      const nested = scalar
        ? messageReader(valueType, scalar.fields, scalar.finish)
        : messageReader(valueType, inner as FieldsRead);
      wireType = WIRE_LENGTH_DELIMITED;
      readValue = (reader) => readMessage(nested, reader, reader.uint32() + reader.pos);
      missing = () => (nested.finish ? nested.finish({}) : {});
    } else {
      const scalar = field.type === 'string' ? repeatingStringReader() : SCALARS[field.type];
      if (scalar === undefined) throw new Error(`${type.name}.${name}: no reader for type ${field.type}`);
      wireType = protobuf.types.basic[field.type as keyof typeof protobuf.types.basic];
      readValue = scalar;
      const zero = protobuf.types.defaults[field.type as keyof typeof protobuf.types.defaults];
      missing = () => zero;
    }
    fields[field.id] = {
      name,
      wireType,
      shape: field.map ? 'map' : field.repeated ? 'list' : 'single',
      read: readValue,
      missing,
      // A message printed as a string (IntOrString) is printed even when "": omitempty skips no struct.
      keepEmpty:
        valueType instanceof protobuf.Type || PRINTED_WHEN_EMPTY.has(`${type.fullName.slice(1)}.${name}`),
    };
  }
  return {
    name: type.name,
    fields: Array.from(fields, (field) => field),
    Decoded: plainObjectMaker(),
    lists: fields.flatMap((field) => (field?.shape === 'list' ? [field.name] : [])),
    ...(finish ? { finish } : {}),
  };
}

for (const name of PRINTED_WHEN_EMPTY) {
  const dot = name.lastIndexOf('.');
  if (root.lookupType(name.slice(0, dot)).fields[name.slice(dot + 1)] === undefined)
    throw new Error(`protobuf schema: no field ${name}`);
}

const readerOf = (typeName: string, read: FieldsRead) => messageReader(root.lookupType(typeName), read);
const TYPE_NAMES: Record<WatchedKind, string> = {
  Service: `${CORE}.Service`,
  EndpointSlice: `${DISCOVERY}.EndpointSlice`,
  Node: `${CORE}.Node`,
  ServiceCIDR: 'k8s.io.api.networking.v1.ServiceCIDR',
};
const KINDS = Object.keys(TYPE_NAMES) as WatchedKind[];
const OBJECT_READERS = Object.fromEntries(
  KINDS.map((kind) => [kind, readerOf(TYPE_NAMES[kind], FIELDS_READ[kind])]),
) as Record<WatchedKind, MessageReader>;
const LIST_READERS = Object.fromEntries(
  KINDS.map((kind) => [
    kind,
    readerOf(`${TYPE_NAMES[kind]}List`, { metadata: { resourceVersion: true }, items: FIELDS_READ[kind] }),
  ]),
) as Record<WatchedKind, MessageReader>;
const unknownReader = readerOf('k8s.io.apimachinery.pkg.runtime.Unknown', {
  typeMeta: { kind: true },
  raw: true,
});
const watchEventReader = readerOf(`${META}.WatchEvent`, { type: true, object: { raw: true } });
/** What the reflector reads of a Status (ApiStatus) and logs. */
const statusReader = readerOf(`${META}.Status`, { status: true, code: true, reason: true, message: true });

function decode(message: MessageReader, bytes: Uint8Array): Fields {
  const reader = protobuf.Reader.create(bytes);
  return readMessage(message, reader, reader.len) as Fields;
}

export function isProtobuf(contentType: string | undefined): boolean {
  return (contentType ?? '').split(';')[0]?.trim() === PROTOBUF_CONTENT_TYPE;
}

/** The runtime.Unknown inside a "k8s\0"-prefixed body: its kind and the raw bytes of the object. */
function unwrap(body: Uint8Array): { kind: string; raw: Uint8Array } {
  if (body.length < MAGIC.length || !MAGIC.equals(body.subarray(0, MAGIC.length)))
    throw new Error('protobuf body does not start with the k8s\\0 magic');
  const unknown = decode(unknownReader, body.subarray(MAGIC.length)) as {
    typeMeta?: { kind?: string };
    raw?: Uint8Array;
  };
  return { kind: unknown.typeMeta?.kind ?? '', raw: unknown.raw ?? new Uint8Array() };
}

/**
 * A protobuf list response body as the JSON list it stands for ({metadata, items}), each item with
 * the fields the parser reads. A list's items have no omitempty: an empty list is `items: []` in
 * JSON, not absent like other empty lists.
 */
export function decodeList(kind: WatchedKind, body: Uint8Array): unknown {
  const list = decode(LIST_READERS[kind], unwrap(body).raw);
  list.items ??= [];
  return list;
}

/** One watch event: the object of the watched kind, or a Status for ERROR events. */
export function decodeWatchEvent(kind: WatchedKind, frame: Uint8Array): { type: string; object: unknown } {
  const event = decode(watchEventReader, frame) as { type?: string; object?: { raw?: Uint8Array } };
  const type = event.type ?? '';
  const inner = unwrap(event.object?.raw ?? new Uint8Array());
  const reader = inner.kind === 'Status' || type === 'ERROR' ? statusReader : OBJECT_READERS[kind];
  return { type, object: decode(reader, inner.raw) };
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
