// `kube-bpf-proxy version`: this build's version and the runtime it runs on.

import { readFileSync } from 'node:fs';
import type { Command } from 'commander';

const packageJson = JSON.parse(readFileSync(new URL(findPackageJson(), import.meta.url), 'utf8')) as {
  version: string;
};

/** package.json sits two levels above src/cli/ in the sources and three above dist/src/cli/. */
function findPackageJson(): string {
  return import.meta.url.includes('/dist/') ? '../../../package.json' : '../../package.json';
}

export const VERSION = packageJson.version;

/** The kube-proxy release whose behaviour the iptables, nftables and ipvs modes reproduce. */
export const KUBE_PROXY_COMPAT_VERSION = 'v1.37.2';

export function versionInfo(): Record<string, string> {
  return {
    version: VERSION,
    kubeProxyCompatibility: KUBE_PROXY_COMPAT_VERSION,
    node: process.version,
    platform: `${process.platform}/${process.arch}`,
  };
}

export function registerVersionCommand(program: Command): void {
  program
    .command('version')
    .description('print the version, the kube-proxy release it matches, and the runtime')
    .option('--output <format>', 'text or json', 'text')
    .action((opts: { output: string }) => {
      const info = versionInfo();
      process.stdout.write(
        opts.output === 'json'
          ? `${JSON.stringify(info)}\n`
          : `${Object.entries(info)
              .map(([k, v]) => `${k}: ${v}`)
              .join('\n')}\n`,
      );
    });
}
