import { describe, expect, it } from 'vitest';
import { endpointSlice as scenarioSlice, serviceObject } from '../../bench/scenario.js';
import type { WatchedKind } from '../../src/model/events.js';
import { endpointSliceSchema, parseObject, serviceSchema } from '../../src/model/parse.js';
import { isEndpointSliceShape, isServiceShape } from '../../src/model/shape.js';
import { malformedObjects, partlyBad, type Raw } from '../support/malformed-corpus.js';
import { mulberry32 } from '../support/random.js';
import { randomApiObject } from '../support/random-api-objects.js';

type HotKind = 'Service' | 'EndpointSlice';
const CHECKS = {
  Service: { schema: serviceSchema, fits: isServiceShape },
  EndpointSlice: { schema: endpointSliceSchema, fits: isEndpointSliceShape },
} as const;

/**
 * Holds the quick check to its schema for one raw object: it never takes what the schema refuses,
 * it takes every output of the schema, and the parse (through it or not) is the parse of the
 * schema's output. Returns whether the raw object itself took the quick path.
 */
function agrees(kind: HotKind, raw: unknown): boolean {
  const { schema, fits } = CHECKS[kind];
  const zod = schema.safeParse(structuredClone(raw));
  const quick = fits(raw);
  if (quick) expect(zod.success, `the check took what the schema refuses: ${JSON.stringify(raw)}`).toBe(true);
  if (zod.success) {
    expect(fits(zod.data), `the check refused the schema's output: ${JSON.stringify(zod.data)}`).toBe(true);
    expect(parseObject(kind, raw)).toEqual(parseObject(kind, zod.data));
  } else expect(parseObject(kind, raw).ok).toBe(false);
  return quick;
}

// Values of every JSON type and of the edges the rules draw.
const ODD_VALUES: unknown[] = [
  null,
  undefined,
  0,
  -1,
  1.5,
  65535,
  65536,
  86401,
  Number.NaN,
  true,
  '',
  ' ',
  'TCP',
  'Local',
  'ClientIP',
  'None',
  'Bad_Name',
  'a.b',
  'x'.repeat(16),
  'x'.repeat(64),
  'x'.repeat(254),
  [],
  ['10.0.0.1'],
  [null],
  [{}],
  {},
  { name: 'x' },
  Object.create(null),
];

/** Every path to a value inside a raw object. */
function paths(value: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  if (typeof value !== 'object' || value === null) return [prefix];
  const keys = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
  return [prefix, ...keys.flatMap((key) => paths((value as Raw)[key], [...prefix, key]))];
}

/** A copy of `raw` with the value at `path` replaced (or the field deleted, for undefined). */
function mutated(raw: Raw, path: (string | number)[], value: unknown): Raw {
  const copy = structuredClone(raw);
  let target = copy;
  for (const key of path.slice(0, -1)) target = target[key];
  const last = path[path.length - 1] as string | number;
  if (value === undefined) delete target[last];
  else target[last] = value;
  return copy;
}

function richService(): Raw {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name: 'web',
      namespace: 'demo',
      uid: 'u-1',
      resourceVersion: '7',
      labels: { app: 'web', 'app.kubernetes.io/name': 'web' },
      annotations: { 'example.com/note': 'anything at all' },
    },
    spec: {
      type: 'LoadBalancer',
      clusterIP: '10.96.0.10',
      clusterIPs: ['10.96.0.10', 'fd00::10'],
      ports: [
        { name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 30080 },
        { name: 'dns', protocol: 'UDP', port: 53, targetPort: 'dns', nodePort: 0 },
      ],
      externalIPs: ['192.0.2.1'],
      loadBalancerSourceRanges: ['10.0.0.0/8'],
      externalTrafficPolicy: 'Local',
      internalTrafficPolicy: 'Cluster',
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
      healthCheckNodePort: 32000,
    },
    status: { loadBalancer: { ingress: [{ ip: '192.0.2.10', hostname: 'lb.example', ipMode: 'VIP' }] } },
  };
}

function richSlice(): Raw {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: 'web-abc.1', namespace: 'demo', labels: { 'kubernetes.io/service-name': 'web' } },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: [
      {
        addresses: ['10.244.1.5'],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: 'node-1',
        zone: 'a',
        hints: { forZones: [{ name: 'a' }], forNodes: [{ name: 'node-1' }] },
      },
    ],
  };
}

describe('the quick shape checks of Services and EndpointSlices (src/model/shape.ts)', () => {
  it('agree with the zod schemas on 4,000 random API objects, good and malformed', () => {
    const rand = mulberry32(28);
    let quick = 0;
    for (let i = 0; i < 2000; i++) {
      for (const kind of ['Service', 'EndpointSlice'] as const)
        if (agrees(kind, randomApiObject(kind, rand))) quick++;
    }
    // Most random objects are valid: the quick path is taken, and the schema's path too.
    expect(quick).toBeGreaterThan(1000);
    expect(quick).toBeLessThan(4000);
  });

  it('agree on every field of a full Service and EndpointSlice set to values of every type', () => {
    let refused = 0;
    for (const [kind, raw] of [
      ['Service', richService()],
      ['EndpointSlice', richSlice()],
    ] as const) {
      expect(agrees(kind, raw)).toBe(true);
      for (const path of paths(raw).filter((p) => p.length > 0)) {
        for (const value of ODD_VALUES) if (!agrees(kind, mutated(raw, path, value))) refused++;
      }
    }
    expect(refused).toBeGreaterThan(500);
  });

  it('agree on the malformed corpus and on objects with entries left out', () => {
    const hot = (kind: WatchedKind): kind is HotKind => kind === 'Service' || kind === 'EndpointSlice';
    const objects = malformedObjects().filter((o) => hot(o.kind));
    expect(objects.length).toBeGreaterThan(40);
    for (const { kind, object } of objects) agrees(kind as HotKind, object);
    for (const i of [4, 5]) {
      const { object } = partlyBad(i);
      expect(agrees(object.kind as HotKind, object)).toBe(true);
      const parsed = parseObject(object.kind as HotKind, object);
      expect(parsed.ok && parsed.leftOut).toMatch(/must be an IP|must hold at least one address/);
    }
  });

  it('take the objects the bench lists, and a label key JSON.parse makes an own "__proto__" is left to zod', () => {
    expect(isServiceShape(serviceObject(3, { services: 10, endpoints: 10 }))).toBe(true);
    expect(isEndpointSliceShape(scenarioSlice(3, { services: 10, endpoints: 10 }))).toBe(true);
    const raw = JSON.parse(
      '{"metadata":{"name":"web","namespace":"demo","labels":{"__proto__":"x"}},"addressType":"IPv4"}',
    );
    expect(isEndpointSliceShape(raw)).toBe(false);
    agrees('EndpointSlice', raw);
  });
});
