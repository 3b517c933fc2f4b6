// The codec machinery behind layout.ts: field codecs with an offset (little-endian integers,
// big-endian ports, addresses as strings), struct and scalar codecs that encode and decode a map's
// keys and values, one or many back to back for the batch syscalls, and the sum of per-CPU values.

import { formatIP, ipBytes } from '../../net/ip.js';

export interface Field<V> {
  offset: number;
  size: number;
  read(buf: Buffer, at: number): V;
  write(buf: Buffer, at: number, value: V): void;
}

type AnyField = Field<string> | Field<number> | Field<bigint>;
export type Fields = Record<string, AnyField>;
type FieldValue<F> = F extends Field<infer V> ? V : never;
export type StructValue<F extends Fields> = { [K in keyof F]: FieldValue<F[K]> };

export function u8(offset: number): Field<number> {
  return {
    offset,
    size: 1,
    read: (b, at) => b.readUInt8(at + offset),
    write: (b, at, v) => b.writeUInt8(v, at + offset),
  };
}
export function u16(offset: number): Field<number> {
  return {
    offset,
    size: 2,
    read: (b, at) => b.readUInt16LE(at + offset),
    write: (b, at, v) => b.writeUInt16LE(v, at + offset),
  };
}
export function u32(offset: number): Field<number> {
  return {
    offset,
    size: 4,
    read: (b, at) => b.readUInt32LE(at + offset),
    write: (b, at, v) => b.writeUInt32LE(v >>> 0, at + offset),
  };
}
export function u64(offset: number): Field<bigint> {
  return {
    offset,
    size: 8,
    read: (b, at) => b.readBigUInt64LE(at + offset),
    write: (b, at, v) => b.writeBigUInt64LE(v, at + offset),
  };
}
/** A __be16 port: host-order number in TS, network order in the map. */
export function port(offset: number): Field<number> {
  return {
    offset,
    size: 2,
    read: (b, at) => b.readUInt16BE(at + offset),
    write: (b, at, v) => b.writeUInt16BE(v, at + offset),
  };
}
/** A __be32 (an IPv6 Fragment header's identification): host-order number, network order. */
export function be32(offset: number): Field<number> {
  return {
    offset,
    size: 4,
    read: (b, at) => b.readUInt32BE(at + offset),
    write: (b, at, v) => b.writeUInt32BE(v >>> 0, at + offset),
  };
}
function ipField(offset: number, family: 'IPv4' | 'IPv6'): Field<string> {
  const size = family === 'IPv4' ? 4 : 16;
  return {
    offset,
    size,
    read: (b, at) => formatIP(new Uint8Array(b.subarray(at + offset, at + offset + size))),
    write: (b, at, v) => b.set(ipBytes(v, family), at + offset),
  };
}

export const ip4 = (offset: number) => ipField(offset, 'IPv4');
export const ip6 = (offset: number) => ipField(offset, 'IPv6');

export class StructCodec<F extends Fields> {
  /** The fields once, in order: encode and decode run 10^5 times a cold sync. */
  private readonly fieldList: [string, Field<unknown>][];

  constructor(
    /** The struct's name in types.h (and in the object's BTF). */
    readonly cName: string,
    readonly size: number,
    readonly fields: F,
    /** Padding members: always written as zero, checked against BTF like the fields. */
    readonly padding: Record<string, number> = {},
  ) {
    for (const [name, field] of Object.entries(fields)) {
      if (field.offset + field.size > size) throw new Error(`${cName}.${name} lies outside ${size} bytes`);
    }
    this.fieldList = Object.entries(fields) as [string, Field<unknown>][];
  }

  encode(value: StructValue<F>): Buffer {
    const buf = Buffer.alloc(this.size);
    this.encodeInto(buf, 0, value);
    return buf;
  }

  /** Writes at `at` (for packed batch buffers); padding bytes are zeroed. */
  encodeInto(buf: Buffer, at: number, value: StructValue<F>): void {
    buf.fill(0, at, at + this.size);
    this.writeFields(buf, at, value);
  }

  private writeFields(buf: Buffer, at: number, value: StructValue<F>): void {
    const fields = this.fieldList;
    for (let i = 0; i < fields.length; i++) {
      const [name, field] = fields[i]!;
      field.write(buf, at, value[name as keyof F]);
    }
  }

  decode(buf: Buffer, at = 0): StructValue<F> {
    if (buf.length < at + this.size)
      throw new Error(`${this.cName}: need ${this.size} bytes at ${at}, have ${buf.length}`);
    const out: Record<string, unknown> = {};
    for (const [name, field] of this.fieldList) out[name] = field.read(buf, at);
    return out as StructValue<F>;
  }

  /** Packs many values back to back, as the batch syscalls want them. */
  encodeMany(values: readonly StructValue<F>[]): Buffer {
    // Buffer.alloc zeroes the padding already.
    const buf = Buffer.alloc(this.size * values.length);
    for (let i = 0; i < values.length; i++) this.writeFields(buf, i * this.size, values[i]!);
    return buf;
  }
}

/** A map key or value that is a single scalar (__u32 ids, __u8 markers, __be32 node address). */
export class ScalarCodec<V> {
  constructor(
    readonly size: number,
    private readonly field: Field<V>,
  ) {}
  encode(value: V): Buffer {
    const buf = Buffer.alloc(this.size);
    this.field.write(buf, 0, value);
    return buf;
  }
  encodeInto(buf: Buffer, at: number, value: V): void {
    this.field.write(buf, at, value);
  }
  decode(buf: Buffer, at = 0): V {
    return this.field.read(buf, at);
  }
  encodeMany(values: readonly V[]): Buffer {
    const buf = Buffer.alloc(this.size * values.length);
    for (let i = 0; i < values.length; i++) this.field.write(buf, i * this.size, values[i]!);
    return buf;
  }
}

/** Bytes one element of a per-CPU map takes in a lookup buffer. */
export function perCpuValueSize(valueSize: number, cpus: number): number {
  return Math.ceil(valueSize / 8) * 8 * cpus;
}

/** Sums a per-CPU value of u64 counters (every counter struct in types.h is all u64). */
export function sumPerCpu<F extends Fields>(
  codec: StructCodec<F>,
  buf: Buffer,
  cpus: number,
): StructValue<F> {
  const stride = Math.ceil(codec.size / 8) * 8;
  const total = codec.decode(buf, 0) as Record<string, unknown>;
  for (let cpu = 1; cpu < cpus; cpu++) {
    const part = codec.decode(buf, cpu * stride) as Record<string, unknown>;
    for (const k of Object.keys(total)) total[k] = (total[k] as bigint) + (part[k] as bigint);
  }
  return total as StructValue<F>;
}
