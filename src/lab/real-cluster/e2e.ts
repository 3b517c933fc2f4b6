// The upstream e2e tests (e2e.test v1.37.2, --provider=skeleton) against the real cluster, run
// from the control plane's network namespace (the nodes' wire is reachable from there, as from a
// machine of the cluster's network), and their junit report read back as per-spec results.

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The Services specs: every `[sig-network] Services` spec and the granular Service checks. */
export const SERVICES_FOCUS = String.raw`\[sig-network\] Services|\[sig-network\] Networking Granular Checks: Services`;
/**
 * Left out: specs that disrupt or need the cluster alone ([Serial], [Disruptive]) and feature-gated
 * specs ([Feature:...]). The specs that need a cloud provider's load balancer skip themselves
 * (e2eskipper), saying why, so they are counted as skipped with their reason.
 */
export const DEFAULT_SKIP = String.raw`\[Serial\]|\[Disruptive\]|\[Feature:`;
/**
 * In a dual-stack cluster: the dual-stack specs (test/e2e/network/dual_stack.go at v1.37.2: the
 * Services of each family and order, the granular Service checks on the secondary family, and the
 * pods' and nodes' addresses of both families), but for SCTP's, which the bpf data plane leaves out.
 */
export const DUAL_STACK_FOCUS = String.raw`\[Feature:IPv6DualStack\]`;
export const DUAL_STACK_SKIP = String.raw`\[Serial\]|\[Disruptive\]|\[Feature:SCTPConnectivity\]`;

/** The specs a cluster of either IP family mode runs, before --focus narrows them. */
export function specSelection(ipFamily: 'ipv4' | 'dual'): { focus: string; skip: string } {
  return ipFamily === 'dual'
    ? { focus: DUAL_STACK_FOCUS, skip: DUAL_STACK_SKIP }
    : { focus: SERVICES_FOCUS, skip: DEFAULT_SKIP };
}

/** The specs that match both regular expressions (RE2 has no lookahead: either order). */
export function narrowFocus(base: string, extra: string | undefined): string {
  return extra ? `(?:${base}).*(?:${extra})|(?:${extra}).*(?:${base})` : base;
}

export type SpecStatus = 'passed' | 'failed' | 'skipped';
export interface SpecResult {
  name: string;
  status: SpecStatus;
  /** The failure's or the skip's message. */
  message: string;
  seconds: number;
}

const ATTRIBUTE = (tag: string, name: string) => new RegExp(`\\b${name}="([^"]*)"`).exec(tag)?.[1] ?? '';

function unescapeXml(text: string): string {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;|&apos;/g, "'")
    .replace(/&#x([0-9a-f]+);/gi, (_, hex: string) => String.fromCodePoint(Number.parseInt(hex, 16)))
    .replace(/&amp;/g, '&');
}

/**
 * The specs a ginkgo junit report says ran (pure). Ginkgo lists every spec of the suite; the ones
 * left out by focus or skip are "skipped" with the bare message "skipped", and so are not results:
 * a spec that skipped itself says why ("skipped - ..."). Suite setup nodes are not specs.
 */
export function parseJunit(xml: string): SpecResult[] {
  const results: SpecResult[] = [];
  for (const match of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const tag = match[1] ?? '';
    const body = match[2] ?? '';
    const name = unescapeXml(ATTRIBUTE(tag, 'name'));
    if (!name.startsWith('[It]')) continue;
    const failure = /<(failure|error)\b([^>]*)>/.exec(body);
    const skipped = /<skipped\b([^>]*)>/.exec(body);
    const message = unescapeXml(ATTRIBUTE(failure?.[2] ?? skipped?.[1] ?? '', 'message'));
    if (!failure && skipped && message.trim() === 'skipped') continue;
    results.push({
      name: name.replace(/^\[It\]\s*/, ''),
      status: failure ? 'failed' : skipped ? 'skipped' : 'passed',
      message,
      seconds: Number(ATTRIBUTE(tag, 'time')) || 0,
    });
  }
  return results;
}

export function countResults(results: SpecResult[]): Record<SpecStatus, number> {
  const counts = { passed: 0, failed: 0, skipped: 0 };
  for (const r of results) counts[r.status] += 1;
  return counts;
}

export interface E2eRun {
  e2eBin: string;
  kubectl: string;
  /** An admin kubeconfig whose server is reachable from the namespace the tests run in. */
  kubeconfig: string;
  /** The network namespace (full name) the tests run in. */
  netns: string;
  focus: string;
  skip: string;
  reportDir: string;
}

/** Runs e2e.test (its output goes to this process's) and returns the specs its junit report lists. */
export async function runE2e(run: E2eRun): Promise<SpecResult[]> {
  const args = [
    `--net=/run/netns/${run.netns}`,
    '--',
    join(run.e2eBin, 'e2e.test'),
    '--provider=skeleton',
    `--kubeconfig=${run.kubeconfig}`,
    `--kubectl-path=${run.kubectl}`,
    `--report-dir=${run.reportDir}`,
    `--ginkgo.focus=${run.focus}`,
    `--ginkgo.skip=${run.skip}`,
    '--ginkgo.no-color',
    '--ginkgo.silence-skips',
    '--ginkgo.timeout=3h',
    '--dump-logs-on-failure=false',
  ];
  const child = spawn('nsenter', args, { stdio: ['ignore', 'inherit', 'inherit'] });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  let xml: string;
  try {
    xml = readFileSync(join(run.reportDir, 'junit_01.xml'), 'utf8');
  } catch {
    throw new Error(`e2e.test exited (${code}) without a junit report in ${run.reportDir}`);
  }
  return parseJunit(xml);
}
