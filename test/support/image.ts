// The agent image for the pod tests (issue 17): the OCI archive scripts/build-image.sh writes,
// named by KBP_IMAGE (and KBP_IMAGE_NEXT, a newer build, for the upgrade test); .ci/run builds
// both. Outside CI the tests skip, saying why, when an archive, podman or root is missing; in CI
// they must run.

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe } from 'vitest';
import { FakeApiServer, type FakeObject, type FakeResource } from './fake-apiserver.js';
import { isRoot } from './privileges.js';

const inCI = process.env.CI === 'true';

function hasPodman(): boolean {
  try {
    execFileSync('podman', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Why the image tests cannot run here, or null when they can. */
function missing(vars: string[]): string | null {
  if (!isRoot) return 'not running as root';
  if (!hasPodman()) return 'podman is not installed (bash scripts/install-image-tools.sh)';
  for (const name of vars) {
    const file = process.env[name];
    if (!file) return `${name} is not set (build with bash scripts/build-image.sh --out FILE)`;
    if (!existsSync(file)) return `${name}=${file} does not exist`;
  }
  return null;
}

/** describe, or describe.skip with the reason, for tests that need the image archives `vars`. */
export function describeImage(vars: string[]): typeof describe {
  const why = missing(vars);
  if (why === null) return describe;
  if (inCI) throw new Error(`CI=true but the image tests cannot run: ${why}`);
  return ((...args: Parameters<typeof describe>) => {
    console.warn(`skipping ${String(args[0])}: ${why}`);
    return describe.skip(...args);
  }) as typeof describe;
}

const RESOURCE_OF_KIND: Record<string, FakeResource> = {
  Node: 'nodes',
  Service: 'services',
  EndpointSlice: 'endpointslices',
};

/** A fake API server holding `objects` (Nodes, Services, EndpointSlices). */
export async function fakeApiServerWith(objects: Record<string, unknown>[]): Promise<FakeApiServer> {
  const api = new FakeApiServer();
  for (const object of objects) {
    const resource = RESOURCE_OF_KIND[String(object.kind)];
    if (!resource) throw new Error(`the fake API server has no resource for kind ${String(object.kind)}`);
    const { kind: _kind, apiVersion: _apiVersion, ...rest } = object;
    api.create(resource, rest as FakeObject);
  }
  await api.start();
  return api;
}

/** 127.0.0.1 and the port of a started fake API server. */
export function apiAddress(api: FakeApiServer): { host: string; port: number } {
  const url = new URL(api.url);
  return { host: url.hostname, port: Number(url.port) };
}
