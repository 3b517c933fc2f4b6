import { HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL } from './types.js';

/**
 * kube-proxy's informer label selector (`!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`)
 * evaluated on an object's labels. Sources that do not list through the API server (manifest files)
 * apply it themselves so they see exactly the objects kube-proxy's informers see. `labels` is the raw
 * `metadata.labels`: anything that is not an object has neither label, so it matches (the parser then
 * reports the bad labels).
 */
export function matchesKubeProxySelector(labels: unknown): boolean {
  if (typeof labels !== 'object' || labels === null) return true;
  return !Object.hasOwn(labels, SERVICE_PROXY_NAME_LABEL) && !Object.hasOwn(labels, HEADLESS_LABEL);
}
