// One command-line flag's spec, and its value parsed from text as pflag parses it (Go's
// strconv.ParseBool, ParseInt, durations, lists, feature gates): a bad value is reported with every
// other problem instead of aborting the command line. The flags themselves are in flags.ts.

import type { Problem } from './decode.js';
import type { KubeProxySettings } from './defaults.js';
import { nanosecondsToSeconds, parseGoDuration } from './duration.js';

export interface FlagValueTypes {
  string: string;
  bool: boolean;
  int32: number;
  uint32: number;
  float: number;
  duration: number;
  list: string[];
  gates: Record<string, boolean>;
}
export type FlagKind = keyof FlagValueTypes;

export interface FlagSpec {
  name: string;
  short?: string;
  kind: FlagKind;
  /** Accepted words, for kind string. */
  choices?: readonly string[];
  description: string;
  /** Writes the value; returns the file paths it set. */
  apply(
    raw: string | boolean | readonly string[],
    settings: KubeProxySettings,
    problems: Problem[],
  ): string[];
}

// strconv.ParseBool, which pflag uses for boolean flags.
const GO_TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const GO_FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

function parseFlagValue<K extends FlagKind>(
  kind: K,
  raw: string | boolean | readonly string[],
  spec: { name: string; choices?: readonly string[] },
  problems: Problem[],
): FlagValueTypes[K] | undefined {
  const path = `--${spec.name}`;
  const fail = (message: string) => {
    problems.push({ path, message });
    return undefined;
  };
  const items = typeof raw === 'string' ? [raw] : Array.isArray(raw) ? (raw as readonly string[]) : [];
  const text = typeof raw === 'string' ? raw : '';
  const integer = (min: number, max: number) => {
    if (!/^[+-]?\d+$/.test(text)) return fail(`must be an integer, got ${JSON.stringify(text)}`);
    const n = Number(text);
    return n >= min && n <= max ? n : fail(`must be an integer in [${min}, ${max}], got ${text}`);
  };
  let value: unknown;
  switch (kind) {
    case 'string':
      if (spec.choices && !spec.choices.includes(text)) {
        return fail(`must be one of ${spec.choices.join(', ')}; got ${JSON.stringify(text)}`);
      }
      value = text;
      break;
    case 'bool':
      if (raw === true || GO_TRUE.has(text)) value = true;
      else if (GO_FALSE.has(text)) value = false;
      else return fail(`must be true or false, got ${JSON.stringify(text)}`);
      break;
    case 'int32':
      value = integer(-(2 ** 31), 2 ** 31 - 1);
      break;
    case 'uint32':
      value = integer(0, 2 ** 32 - 1);
      break;
    case 'float': {
      const n = Number(text);
      if (text.trim() === '' || !Number.isFinite(n))
        return fail(`must be a number, got ${JSON.stringify(text)}`);
      value = n;
      break;
    }
    case 'duration': {
      const parsed = parseGoDuration(text);
      if (!parsed.ok) return fail(parsed.message);
      value = nanosecondsToSeconds(parsed.nanoseconds);
      break;
    }
    case 'list':
      value = items.flatMap((item) => item.split(',')).filter((item) => item !== '');
      break;
    case 'gates': {
      const gates: Record<string, boolean> = {};
      for (const pair of items.flatMap((item) => item.split(','))) {
        const trimmed = pair.trim();
        if (trimmed === '') continue;
        const eq = trimmed.indexOf('=');
        const word = eq < 0 ? '' : trimmed.slice(eq + 1).trim();
        if (eq < 0 || !(GO_TRUE.has(word) || GO_FALSE.has(word))) {
          return fail(`must be a list of Gate=true|false pairs, got ${JSON.stringify(trimmed)}`);
        }
        gates[trimmed.slice(0, eq).trim()] = GO_TRUE.has(word);
      }
      value = gates;
      break;
    }
  }
  return value as FlagValueTypes[K];
}

export function flag<K extends FlagKind>(
  name: string,
  kind: K,
  description: string,
  set: (settings: KubeProxySettings, value: FlagValueTypes[K]) => string | string[],
  extra: { short?: string; choices?: readonly string[] } = {},
): FlagSpec {
  return {
    name,
    kind,
    description,
    ...extra,
    apply(raw, settings, problems) {
      const value = parseFlagValue(kind, raw, { name, ...extra }, problems);
      if (value === undefined) return [];
      const paths = set(settings, value);
      return Array.isArray(paths) ? paths : [paths];
    },
  };
}
