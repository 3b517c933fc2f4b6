// Settings kube-bpf-proxy accepts, so a kube-proxy ConfigMap loads unchanged, but that take no
// effect here, each with the warning the agent logs at start-up when the setting asks for
// something (docs/config.md, "Configuration audit"). Their defaults say nothing.

import type { KubeProxySettings } from './defaults.js';
import type { KubeProxyConfigurationFile } from './file.js';

const UNSPECIFIED = new Set(['0.0.0.0', '::']);

/** One warning per setting that asks for something this agent does not do (pure). */
export function ineffectiveSettingWarnings(
  file: KubeProxyConfigurationFile,
  settings: KubeProxySettings,
  origins: ReadonlyMap<string, string>,
): string[] {
  const warnings: string[] = [];
  if (settings.enableProfiling)
    warnings.push('enableProfiling: true has no effect: kube-bpf-proxy serves no /debug/pprof handlers');
  if (settings.showHiddenMetricsForVersion !== '')
    warnings.push('showHiddenMetricsForVersion has no effect: kube-bpf-proxy hides no metrics');
  if (settings.logging.vmodule.length > 0)
    warnings.push(
      'logging.vmodule has no effect: one verbosity (logging.verbosity) applies to the whole agent',
    );
  if (file.logging?.options !== undefined)
    warnings.push(
      'logging.options has no effect: the agent writes every line to stderr at once (no split stream, no buffer)',
    );
  // "text" is kube-proxy's default, so only a format asked for says something.
  if (
    settings.logging.format === 'text' &&
    (file.logging?.format === 'text' || origins.has('logging.format'))
  )
    warnings.push('logging.format: text has no effect: the agent logs JSON lines');
  if (!UNSPECIFIED.has(settings.bindAddress))
    warnings.push(
      `bindAddress ${settings.bindAddress} only moves the healthz and metrics defaults here; the node IPs come from the Node object (kube-proxy falls back to bindAddress when the Node has none)`,
    );
  return warnings;
}
