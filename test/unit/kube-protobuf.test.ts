// The protobuf wire format of the kube source: envelopes, lists and watch frames encoded here with
// the same generated.proto schemas decode to the objects the JSON API gives, with the fields the
// parser reads; and for seeded random objects, good and malformed, the parser makes the same of
// both encodings.

import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { listBody, watchEventBytes } from '../../bench/k8s-wire.js';
import type { WatchedKind } from '../../src/model/events.js';
import { describeObject, FIELDS_READ, type FieldsRead, parseObject } from '../../src/model/parse.js';
import { acceptHeader } from '../../src/sources/api-transport.js';
import schema from '../../src/sources/k8s-proto.json' with { type: 'json' };
import {
  decodeList,
  decodeWatchEvent,
  isProtobuf,
  PROTOBUF_CONTENT_TYPE,
  WatchFrameReader,
} from '../../src/sources/protobuf.js';
import { decodeListBody, identityOf, parseWatchLine } from '../../src/sources/reflector.js';
import { mulberry32 } from '../support/random.js';
import { randomApiObject } from '../support/random-api-objects.js';

const root = protobuf.Root.fromJSON(schema.root);
const MAGIC = Buffer.from('k8s\0', 'latin1');

function envelope(typeName: string, apiVersion: string, kind: string, object: object): Buffer {
  const type = root.lookupType(typeName);
  const unknownType = root.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown');
  const raw = type.encode(type.fromObject(object)).finish();
  return Buffer.concat([
    MAGIC,
    unknownType.encode(unknownType.fromObject({ typeMeta: { apiVersion, kind }, raw })).finish(),
  ]);
}

function frame(type: string, object: Buffer): Buffer {
  const eventType = root.lookupType('k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent');
  const event = eventType.encode(eventType.fromObject({ type, object: { raw: object } })).finish();
  const length = Buffer.alloc(4);
  length.writeUInt32BE(event.length);
  return Buffer.concat([length, event]);
}

/** A Service as protobuf fields (IntOrString and Time as their messages). */
const serviceProto = {
  metadata: {
    name: 'web',
    namespace: 'demo',
    resourceVersion: '42',
    labels: { app: 'web' },
    creationTimestamp: { seconds: 1764608400 },
  },
  spec: {
    type: 'NodePort',
    clusterIP: '10.96.0.10',
    clusterIPs: ['10.96.0.10'],
    ports: [
      { name: 'http', protocol: 'TCP', port: 80, targetPort: { type: 0, intVal: 8080 }, nodePort: 30080 },
      { name: 'metrics', protocol: 'TCP', port: 9090, targetPort: { type: 1, strVal: 'metrics' } },
    ],
    externalTrafficPolicy: 'Local',
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
  },
  status: { loadBalancer: {} },
};

/** The same Service as the JSON API prints it, with the fields the parser reads (not creationTimestamp). */
const serviceJson = {
  metadata: { name: 'web', namespace: 'demo', resourceVersion: '42', labels: { app: 'web' } },
  spec: {
    type: 'NodePort',
    clusterIP: '10.96.0.10',
    clusterIPs: ['10.96.0.10'],
    ports: [
      { name: 'http', protocol: 'TCP', port: 80, targetPort: 8080, nodePort: 30080 },
      { name: 'metrics', protocol: 'TCP', port: 9090, targetPort: 'metrics' },
    ],
    externalTrafficPolicy: 'Local',
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
  },
  status: { loadBalancer: {} },
};

describe('kube source protobuf', () => {
  it('asks for protobuf with JSON as the fallback only when contentType says protobuf', () => {
    expect(acceptHeader(PROTOBUF_CONTENT_TYPE)).toBe('application/vnd.kubernetes.protobuf, application/json');
    expect(acceptHeader('application/json')).toBe('application/json');
    expect(isProtobuf('application/vnd.kubernetes.protobuf;stream=watch')).toBe(true);
    expect(isProtobuf('application/json')).toBe(false);
  });

  it('decodes a list envelope to the JSON list: IntOrString, maps, only the fields present and read', () => {
    const body = envelope('k8s.io.api.core.v1.ServiceList', 'v1', 'ServiceList', {
      metadata: { resourceVersion: '43' },
      items: [serviceProto],
    });
    expect(decodeList('Service', body)).toEqual({
      metadata: { resourceVersion: '43' },
      items: [serviceJson],
    });
  });

  it('an empty list has items [], as in JSON (a Node list before the node registers, no ServiceCIDRs)', () => {
    const body = envelope('k8s.io.api.core.v1.NodeList', 'v1', 'NodeList', {
      metadata: { resourceVersion: '9' },
    });
    expect(decodeList('Node', body)).toEqual({ metadata: { resourceVersion: '9' }, items: [] });
  });

  it('leaves out empty strings, which the API server writes and the JSON API omits', () => {
    // As kube-apiserver sends a ClusterIP Service: every non-pointer string field on the wire.
    const clusterIP = {
      metadata: { name: 'db', namespace: 'demo', resourceVersion: '7', generateName: '' },
      spec: {
        type: 'ClusterIP',
        clusterIP: '10.96.0.20',
        ports: [
          { name: '', protocol: 'TCP', port: 5432, targetPort: { type: 0, intVal: 5432 }, nodePort: 0 },
        ],
        externalTrafficPolicy: '',
        loadBalancerIP: '',
        sessionAffinity: 'None',
      },
    };
    const body = envelope('k8s.io.api.core.v1.ServiceList', 'v1', 'ServiceList', {
      metadata: { resourceVersion: '8' },
      items: [clusterIP],
    });
    expect(decodeList('Service', body)).toEqual({
      metadata: { resourceVersion: '8' },
      items: [
        {
          metadata: { name: 'db', namespace: 'demo', resourceVersion: '7' },
          spec: {
            type: 'ClusterIP',
            clusterIP: '10.96.0.20',
            ports: [{ protocol: 'TCP', port: 5432, targetPort: 5432, nodePort: 0 }],
            sessionAffinity: 'None',
          },
        },
      ],
    });
  });

  it('decodes EndpointSlices with conditions, hints and unnamed ports', () => {
    const body = envelope(
      'k8s.io.api.discovery.v1.EndpointSliceList',
      'discovery.k8s.io/v1',
      'EndpointSliceList',
      {
        metadata: { resourceVersion: '7' },
        items: [
          {
            metadata: { name: 'web-1', namespace: 'demo', labels: { 'kubernetes.io/service-name': 'web' } },
            addressType: 'IPv4',
            endpoints: [
              {
                addresses: ['10.244.1.10'],
                conditions: { ready: false, serving: true, terminating: true },
                nodeName: 'node-a',
                hints: { forZones: [{ name: 'zone-a' }] },
              },
            ],
            ports: [{ port: 8080, protocol: 'TCP' }],
          },
        ],
      },
    );
    expect(decodeList('EndpointSlice', body)).toEqual({
      metadata: { resourceVersion: '7' },
      items: [
        {
          metadata: { name: 'web-1', namespace: 'demo', labels: { 'kubernetes.io/service-name': 'web' } },
          addressType: 'IPv4',
          endpoints: [
            {
              addresses: ['10.244.1.10'],
              conditions: { ready: false, serving: true, terminating: true },
              nodeName: 'node-a',
              hints: { forZones: [{ name: 'zone-a' }] },
            },
          ],
          ports: [{ port: 8080, protocol: 'TCP' }],
        },
      ],
    });
  });

  it('decodes ServiceCIDR lists and watch events (networking.k8s.io/v1), without the status it does not read', () => {
    const cidrProto = {
      metadata: { name: 'kubernetes', resourceVersion: '7', creationTimestamp: { seconds: 1764608400 } },
      spec: { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] },
      status: {
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            lastTransitionTime: { seconds: 1764608400 },
            reason: '',
            message: '',
          },
        ],
      },
    };
    const cidrJson = {
      metadata: { name: 'kubernetes', resourceVersion: '7' },
      spec: { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] },
    };
    const body = envelope(
      'k8s.io.api.networking.v1.ServiceCIDRList',
      'networking.k8s.io/v1',
      'ServiceCIDRList',
      {
        metadata: { resourceVersion: '8' },
        items: [cidrProto],
      },
    );
    expect(decodeList('ServiceCIDR', body)).toEqual({
      metadata: { resourceVersion: '8' },
      items: [cidrJson],
    });
    const object = envelope(
      'k8s.io.api.networking.v1.ServiceCIDR',
      'networking.k8s.io/v1',
      'ServiceCIDR',
      cidrProto,
    );
    const [event] = new WatchFrameReader().push(frame('MODIFIED', object));
    expect(decodeWatchEvent('ServiceCIDR', event as Buffer)).toEqual({ type: 'MODIFIED', object: cidrJson });
  });

  it('refuses a body without the k8s magic', () => {
    expect(() => decodeList('Service', Buffer.from('{"items":[]}'))).toThrow(/magic/);
  });

  it('splits a watch stream into frames whatever the chunk boundaries, and decodes events and Status', () => {
    const stream = Buffer.concat([
      frame('ADDED', envelope('k8s.io.api.core.v1.Service', 'v1', 'Service', serviceProto)),
      frame(
        'ERROR',
        envelope('k8s.io.apimachinery.pkg.apis.meta.v1.Status', 'v1', 'Status', {
          status: 'Failure',
          reason: 'Expired',
          code: 410,
          message: 'too old resource version: 1 (42)',
        }),
      ),
    ]);
    const reader = new WatchFrameReader();
    const frames: Buffer[] = [];
    for (let i = 0; i < stream.length; i += 3) frames.push(...reader.push(stream.subarray(i, i + 3)));
    expect(frames.map((f) => decodeWatchEvent('Service', f))).toEqual([
      { type: 'ADDED', object: serviceJson },
      {
        type: 'ERROR',
        object: {
          status: 'Failure',
          reason: 'Expired',
          code: 410,
          message: 'too old resource version: 1 (42)',
        },
      },
    ]);
  });

  it('refuses a frame length no object has', () => {
    const bogus = Buffer.alloc(8);
    bogus.writeUInt32BE(0x7fffffff);
    expect(() => new WatchFrameReader().push(bogus)).toThrow(/watch frame of/);
  });

  it('has a protobuf field for every field the parser reads, but kind (in the envelope)', () => {
    const TYPES: Record<WatchedKind, string> = {
      Service: 'k8s.io.api.core.v1.Service',
      EndpointSlice: 'k8s.io.api.discovery.v1.EndpointSlice',
      Node: 'k8s.io.api.core.v1.Node',
      ServiceCIDR: 'k8s.io.api.networking.v1.ServiceCIDR',
    };
    const missing: string[] = [];
    const walk = (type: protobuf.Type, read: FieldsRead, path: string) => {
      for (const [name, inner] of Object.entries(read)) {
        const field = type.fields[name];
        if (field === undefined) missing.push(`${path}${name}`);
        else if (inner !== true) walk(field.resolvedType as protobuf.Type, inner, `${path}${name}.`);
      }
    };
    root.resolveAll();
    for (const [kind, typeName] of Object.entries(TYPES))
      walk(root.lookupType(typeName), FIELDS_READ[kind as WatchedKind], `${kind}: `);
    expect(missing).toEqual(['Service: kind', 'EndpointSlice: kind', 'Node: kind', 'ServiceCIDR: kind']);
  });

  it('prints a Time as the JSON API does (a Node being deleted)', () => {
    const body = envelope('k8s.io.api.core.v1.NodeList', 'v1', 'NodeList', {
      metadata: { resourceVersion: '3' },
      items: [{ metadata: { name: 'node-a', deletionTimestamp: { seconds: 1764608400, nanos: 5e8 } } }],
    });
    expect(decodeList('Node', body)).toEqual({
      metadata: { resourceVersion: '3' },
      items: [{ metadata: { name: 'node-a', deletionTimestamp: '2025-12-01T17:00:00Z' } }],
    });
  });

  /** Field numbers no schema has, one of each wire type, as a newer API server may send. */
  const unknownFields = () =>
    protobuf.Writer.create()
      .uint32((900 << 3) | 0)
      .uint64(2 ** 40)
      .uint32((901 << 3) | 1)
      .fixed64(7)
      .uint32((902 << 3) | 2)
      .bytes(Buffer.from('unknown'))
      .uint32((903 << 3) | 5)
      .fixed32(9)
      .finish();
  const fieldTag = (typeName: string, field: string) =>
    (root.lookupType(typeName).fields[field]!.id << 3) | 2;

  it('skips fields no schema has, of every wire type, at any depth; "__proto__" stays a label key, as JSON.parse makes it', () => {
    const metaType = root.lookupType('k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta');
    const meta = Buffer.concat([
      metaType.encode(metaType.fromObject({ name: 'web', namespace: 'demo' })).finish(),
      unknownFields(),
      protobuf.Writer.create()
        .uint32(fieldTag('k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta', 'labels'))
        .fork()
        .uint32((1 << 3) | 2)
        .string('__proto__')
        .uint32((2 << 3) | 2)
        .string('x')
        .ldelim()
        .finish(),
    ]);
    const specType = root.lookupType('k8s.io.api.core.v1.ServiceSpec');
    const spec = specType
      .encode(specType.fromObject({ clusterIP: '10.96.0.1', ports: [{ port: 80 }] }))
      .finish();
    const service = protobuf.Writer.create()
      .uint32(fieldTag('k8s.io.api.core.v1.Service', 'metadata'))
      .bytes(meta)
      .uint32(fieldTag('k8s.io.api.core.v1.Service', 'spec'))
      .bytes(Buffer.concat([spec, unknownFields()]))
      .finish();
    const unknownType = root.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown');
    const wrapped = Buffer.concat([
      MAGIC,
      unknownType.encode(unknownType.fromObject({ raw: service })).finish(),
    ]);
    const [event] = new WatchFrameReader().push(frame('ADDED', wrapped));
    const { object } = decodeWatchEvent('Service', event as Buffer);
    const json = JSON.parse(
      '{"metadata":{"name":"web","namespace":"demo","labels":{"__proto__":"x"}},"spec":{"clusterIP":"10.96.0.1","ports":[{"port":80}]}}',
    );
    expect(object).toEqual(json);
    expect(Object.hasOwn((object as typeof json).metadata.labels, '__proto__')).toBe(true);
    expect(parseObject('Service', object)).toEqual(parseObject('Service', json));
  });

  it('refuses a field of the wrong wire type and a message that runs past its end', () => {
    const wrongWireType = protobuf.Writer.create()
      .uint32((root.lookupType('k8s.io.api.core.v1.Service').fields.metadata!.id << 3) | 0)
      .uint32(5)
      .finish();
    const unknownType = root.lookupType('k8s.io.apimachinery.pkg.runtime.Unknown');
    const wrap = (raw: Uint8Array) =>
      Buffer.concat([MAGIC, unknownType.encode(unknownType.fromObject({ raw })).finish()]);
    expect(() => decodeWatchEvent('Service', frame('ADDED', wrap(wrongWireType)).subarray(4))).toThrow(
      /Service\.metadata has wire type 0, not 2/,
    );
    const listType = root.lookupType('k8s.io.api.core.v1.ServiceList');
    const list = listType.encode(listType.fromObject({ metadata: { resourceVersion: '1' } })).finish();
    // The list's metadata says it is one byte longer than the body.
    const overrun = Buffer.from(list);
    overrun[1] = (overrun[1] ?? 0) + 1;
    expect(() => decodeList('Service', wrap(overrun))).toThrow(/index out of range|runs past the end/);
  });

  /** What the kube source makes of a decoded object: the parse result, the problem's identity, the reflector's key. */
  const seen = (kind: WatchedKind) => (object: unknown) => ({
    result: parseObject(kind, object),
    identity: describeObject(object),
    key: identityOf(object),
  });

  it.each(['Service', 'EndpointSlice', 'Node', 'ServiceCIDR'] as const)(
    'random %s objects, good and malformed: the same model and the same problems from JSON and from protobuf, lists and watch events',
    (kind) => {
      const outcomes = { ok: 0, leftOut: 0, refused: 0 };
      for (let seed = 1; seed <= 40; seed++) {
        const rand = mulberry32(seed * 7919 + kind.length);
        const objects = Array.from({ length: 25 }, () => randomApiObject(kind, rand));
        const json = decodeListBody(kind, 'application/json', listBody(kind, objects, String(seed), 'json'));
        const proto = decodeListBody(
          kind,
          PROTOBUF_CONTENT_TYPE,
          listBody(kind, objects, String(seed), 'protobuf'),
        );
        expect(proto.resourceVersion).toBe(json.resourceVersion);
        const fromJson = json.items.map(seen(kind));
        expect(proto.items.map(seen(kind)), `seed ${seed}`).toEqual(fromJson);
        for (const { result } of fromJson) {
          if (!result.ok) outcomes.refused++;
          else if (result.leftOut !== undefined) outcomes.leftOut++;
          else outcomes.ok++;
        }
        for (const object of objects.slice(0, 5)) {
          const line = parseWatchLine(watchEventBytes(kind, 'MODIFIED', object, 'json').toString().trim());
          const [protoFrame] = new WatchFrameReader().push(
            watchEventBytes(kind, 'MODIFIED', object, 'protobuf'),
          );
          const event = decodeWatchEvent(kind, protoFrame as Buffer);
          expect(event.type).toBe('MODIFIED');
          expect(seen(kind)(event.object)).toEqual(seen(kind)(line?.object));
        }
      }
      // Not vacuous: valid objects, objects with entries left out and refused ones, in every kind.
      expect(outcomes.ok).toBeGreaterThan(0);
      expect(outcomes.refused).toBeGreaterThan(0);
      if (kind !== 'Node') expect(outcomes.leftOut).toBeGreaterThan(0);
    },
  );
});
