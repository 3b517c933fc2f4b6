// Small typed decoders over the plain value a YAML/JSON parser returns. Unlike a schema library
// they never stop at the first problem and always hand back what did decode, so one pass can
// report every mistake in a file and validation can still run on the fields that were fine.
// `null` decodes as "absent", as Go's encoding/json leaves a field at its zero value for null.

import { nanosecondsToSeconds, parseGoDuration } from './duration.js';

export interface Problem {
  /** The field in the file's camelCase (`iptables.masqueradeBit`, `nodePortAddresses[1]`) or a flag (`--proxy-mode`). */
  path: string;
  message: string;
}

export type Decoder<T> = (value: unknown, path: string, problems: Problem[]) => T | undefined;
export type Decoded<D> = D extends Decoder<infer T> ? T : never;

type Shape = Record<string, Decoder<unknown>>;
export type DecodedObject<S extends Shape> = { [K in keyof S]?: Decoded<S[K]> };

export function describeValue(value: unknown): string {
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object' && value !== null) return 'an object';
  return `${typeof value} ${JSON.stringify(value)}`;
}

export function childPath(parent: string, key: string): string {
  return parent === '' ? key : `${parent}.${key}`;
}

export const string: Decoder<string> = (value, path, problems) => {
  if (typeof value === 'string') return value;
  problems.push({ path, message: `must be a string, got ${describeValue(value)}` });
  return undefined;
};

export const boolean: Decoder<boolean> = (value, path, problems) => {
  if (typeof value === 'boolean') return value;
  problems.push({ path, message: `must be true or false, got ${describeValue(value)}` });
  return undefined;
};

/** Any JSON number (Go float32/float64 fields such as clientConnection.qps). */
export const number: Decoder<number> = (value, path, problems) => {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  problems.push({ path, message: `must be a number, got ${describeValue(value)}` });
  return undefined;
};

/** An integer within the Go type's range; the range is part of decoding, as encoding/json rejects overflow. */
export function integer(min: number, max: number): Decoder<number> {
  return (value, path, problems) => {
    if (typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max) return value;
    const reason = typeof value === 'number' && Number.isInteger(value) ? ` in [${min}, ${max}]` : '';
    problems.push({ path, message: `must be an integer${reason}, got ${describeValue(value)}` });
    return undefined;
  };
}

export const int32 = integer(-(2 ** 31), 2 ** 31 - 1);
export const uint32 = integer(0, 2 ** 32 - 1);

/** A Go duration string, decoded to seconds. */
export const duration: Decoder<number> = (value, path, problems) => {
  if (typeof value !== 'string') {
    problems.push({ path, message: `must be a duration string such as "30s", got ${describeValue(value)}` });
    return undefined;
  }
  const parsed = parseGoDuration(value);
  if (parsed.ok) return nanosecondsToSeconds(parsed.nanoseconds);
  problems.push({ path, message: parsed.message });
  return undefined;
};

export function oneOf<T extends string>(allowed: readonly T[]): Decoder<T> {
  return (value, path, problems) => {
    if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
    problems.push({ path, message: `must be one of ${allowed.join(', ')}; got ${describeValue(value)}` });
    return undefined;
  };
}

/** A list; null items are dropped like absent ones would be, bad items are reported and skipped. */
export function list<T>(item: Decoder<T>): Decoder<T[]> {
  return (value, path, problems) => {
    if (!Array.isArray(value)) {
      problems.push({ path, message: `must be a list, got ${describeValue(value)}` });
      return undefined;
    }
    const out: T[] = [];
    value.forEach((element, i) => {
      if (element === null) return;
      const decoded = item(element, `${path}[${i}]`, problems);
      if (decoded !== undefined) out.push(decoded);
    });
    return out;
  };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function map<T>(valueDecoder: Decoder<T>): Decoder<Record<string, T>> {
  return (value, path, problems) => {
    if (!isPlainObject(value)) {
      problems.push({ path, message: `must be a map, got ${describeValue(value)}` });
      return undefined;
    }
    const out: Record<string, T> = {};
    for (const [key, element] of Object.entries(value)) {
      if (element === null) continue;
      const decoded = valueDecoder(element, childPath(path, key), problems);
      if (decoded !== undefined) out[key] = decoded;
    }
    return out;
  };
}

/** The shape an object decoder accepts, kept on the decoder so the fields can be listed (fieldPaths). */
const SHAPE = Symbol('shape');
type ObjectDecoder<S extends Shape> = Decoder<DecodedObject<S>> & { [SHAPE]: S };

/**
 * Every field path an object decoder accepts, nested objects walked ("conntrack.min"); a list or
 * map is one field.
 */
export function fieldPaths(decoder: Decoder<unknown>, prefix = ''): string[] {
  const shape = (decoder as Partial<ObjectDecoder<Shape>>)[SHAPE];
  if (shape === undefined) return [prefix];
  return Object.entries(shape).flatMap(([key, field]) =>
    fieldPaths(field, prefix ? `${prefix}.${key}` : key),
  );
}

/** A strict object: every key must be in the shape ("unknown field" otherwise, as kube-proxy's strict decoding). */
export function object<S extends Shape>(shape: S): ObjectDecoder<S> {
  const decoder: Decoder<DecodedObject<S>> = (value, path, problems) => {
    if (!isPlainObject(value)) {
      problems.push({ path, message: `must be an object, got ${describeValue(value)}` });
      return undefined;
    }
    const out: Record<string, unknown> = {};
    for (const [key, element] of Object.entries(value)) {
      const fieldPath = childPath(path, key);
      const fieldDecoder = Object.hasOwn(shape, key) ? shape[key] : undefined;
      if (fieldDecoder === undefined) {
        problems.push({ path: fieldPath, message: 'unknown field' });
        continue;
      }
      if (element === null) continue;
      const decoded = fieldDecoder(element, fieldPath, problems);
      if (decoded !== undefined) out[key] = decoded;
    }
    return out as DecodedObject<S>;
  };
  return Object.assign(decoder, { [SHAPE]: shape });
}
