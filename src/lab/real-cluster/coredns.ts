// Cluster DNS as kubeadm installs it (cmd/kubeadm/app/phases/addons/dns/manifests.go at v1.37.2):
// CoreDNS as a Deployment in kube-system behind the `kube-dns` Service at the kubelets'
// clusterDNS address, with its RBAC and Corefile. Its EndpointSlice is the controller manager's,
// and CoreDNS reaches the API server through the `kubernetes` Service, so it comes up only once
// the proxy under test serves ClusterIPs. The Services e2e specs need it: their reachability
// check (CheckServiceReachability) dials the Service by name.

import { join } from 'node:path';
import { create, type K8sObject } from '../kube-objects.js';
import { until } from '../until.js';
import { CLUSTER_DNS, type RealCluster } from './cluster.js';
import { CLUSTER_DOMAIN } from './node-config.js';
import { archiveImageName } from './proxy.js';

const NAMESPACE = 'kube-system';
const LABELS = { 'k8s-app': 'kube-dns' };

/** kubeadm's Corefile, without `forward` and `loop`: this machine has no upstream resolver to reach. */
const COREFILE = `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    cache 30
    reload
    loadbalance
}
`;

export function coreDnsObjects(image: string, clusterDNS: string): K8sObject[] {
  const meta = (name: string) => ({ name, namespace: NAMESPACE });
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('coredns') },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        {
          apiGroups: [''],
          resources: ['endpoints', 'services', 'pods', 'namespaces'],
          verbs: ['list', 'watch'],
        },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: NAMESPACE }],
    },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: meta('coredns'), data: { Corefile: COREFILE } },
    coreDnsDeployment(image),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { ...meta('kube-dns'), labels: { ...LABELS, 'kubernetes.io/name': 'CoreDNS' } },
      spec: {
        selector: LABELS,
        clusterIP: clusterDNS,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: 53 },
          { name: 'metrics', port: 9153, protocol: 'TCP', targetPort: 9153 },
        ],
      },
    },
  ];
}

function coreDnsDeployment(image: string): K8sObject {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'coredns', namespace: NAMESPACE, labels: LABELS },
    spec: {
      replicas: 1,
      selector: { matchLabels: LABELS },
      template: {
        metadata: { labels: LABELS },
        spec: {
          serviceAccountName: 'coredns',
          priorityClassName: 'system-cluster-critical',
          dnsPolicy: 'Default',
          tolerations: [{ key: 'CriticalAddonsOnly', operator: 'Exists' }],
          containers: [
            {
              name: 'coredns',
              image,
              imagePullPolicy: 'IfNotPresent',
              args: ['-conf', '/etc/coredns/Corefile'],
              ports: [
                { name: 'dns', containerPort: 53, protocol: 'UDP' },
                { name: 'dns-tcp', containerPort: 53, protocol: 'TCP' },
                { name: 'metrics', containerPort: 9153, protocol: 'TCP' },
              ],
              volumeMounts: [{ name: 'config-volume', mountPath: '/etc/coredns', readOnly: true }],
              livenessProbe: {
                httpGet: { path: '/health', port: 8080 },
                periodSeconds: 10,
                failureThreshold: 5,
              },
              readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
              securityContext: {
                allowPrivilegeEscalation: false,
                capabilities: { add: ['NET_BIND_SERVICE'], drop: ['ALL'] },
                readOnlyRootFilesystem: true,
              },
            },
          ],
          volumes: [{ name: 'config-volume', configMap: { name: 'coredns' } }],
        },
      },
    },
  };
}

/** Creates CoreDNS's objects (its image: the name coredns.tar gives it) and waits until it serves. */
export async function installCoreDns(cluster: RealCluster): Promise<void> {
  const { repository, tag } = archiveImageName(join(cluster.parts.dirs.images, 'coredns.tar'));
  for (const object of coreDnsObjects(`${repository}:${tag}`, CLUSTER_DNS))
    await create(cluster.controlPlane, object);
  await until(
    'CoreDNS available',
    async () => {
      const deployment = await cluster.controlPlane.api<{ status?: { availableReplicas?: number } }>(
        'GET',
        '/apis/apps/v1/namespaces/kube-system/deployments/coredns',
      );
      return (deployment.status?.availableReplicas ?? 0) > 0;
    },
    180_000,
  );
}
