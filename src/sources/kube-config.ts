// client-node's KubeConfig without the rest of client-node. Its package index, and even its
// dist/config.js, import the index of every generated model and API class (2,346 modules, some
// 65 MiB of RSS); KubeConfig uses two of those names only to build API clients, which the agent
// never does. A module resolution hook answers config.js's import of that index with a module
// exporting just those two names from their own files. Node 20 runs hooks on a thread of their
// own (about 10 MiB), which is still a third of what the index costs. A client-node version whose
// config.js imports other names from the index fails to link at start, loudly.

import { register } from 'node:module';

/** Runs on the hooks thread: only config.js's import of ./gen/index.js is redirected. */
const HOOKS = `
export async function resolve(specifier, context, next) {
  if (specifier === './gen/index.js' && context.parentURL?.endsWith('/@kubernetes/client-node/dist/config.js')) {
    const gen = (file) => JSON.stringify(new URL('./gen/' + file, context.parentURL).href);
    const source =
      'export { createConfiguration } from ' + gen('configuration.js') + ';' +
      'export { ServerConfiguration } from ' + gen('servers.js') + ';';
    return { url: 'data:text/javascript,' + encodeURIComponent(source), shortCircuit: true };
  }
  return next(specifier, context);
}`;

type ConfigModule = typeof import('@kubernetes/client-node/dist/config.js');
let loading: Promise<ConfigModule> | null = null;

/** The KubeConfig class, imported (once) the first time it is asked for. */
export async function importKubeConfig(): Promise<ConfigModule['KubeConfig']> {
  if (!loading) {
    register(`data:text/javascript,${encodeURIComponent(HOOKS)}`);
    loading = import('@kubernetes/client-node/dist/config.js');
  }
  return (await loading).KubeConfig;
}
