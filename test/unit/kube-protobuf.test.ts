// The protobuf wire format of the kube source: envelopes, lists and watch frames encoded here with
// the same generated.proto schemas decode to the objects the JSON API gives.

import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { acceptHeader } from '../../src/sources/api-transport.js';
import schema from '../../src/sources/k8s-proto.json' with { type: 'json' };
import {
  decodeList,
  decodeWatchEvent,
  isProtobuf,
  PROTOBUF_CONTENT_TYPE,
  WatchFrameReader,
} from '../../src/sources/protobuf.js';

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

/** The same Service as the JSON API prints it. */
const serviceJson = {
  metadata: {
    name: 'web',
    namespace: 'demo',
    resourceVersion: '42',
    labels: { app: 'web' },
    creationTimestamp: '2025-12-01T17:00:00Z',
  },
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

  it('decodes a list envelope to the JSON list: IntOrString, Time, maps, only the fields present', () => {
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

  it('decodes ServiceCIDR lists and watch events (networking.k8s.io/v1), conditions included', () => {
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
      metadata: { name: 'kubernetes', resourceVersion: '7', creationTimestamp: '2025-12-01T17:00:00Z' },
      spec: { cidrs: ['10.96.0.0/16', 'fd00:96::/112'] },
      status: {
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            lastTransitionTime: '2025-12-01T17:00:00Z',
            reason: '',
            message: '',
          },
        ],
      },
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
});
