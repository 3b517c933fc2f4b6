// What every source (the Kubernetes API, manifest files) delivers to the change trackers: raw
// objects as the API serialises them, not yet validated. parse.ts validates them, so a malformed
// object is skipped and counted in one place whatever its source.

export type WatchedKind = 'Service' | 'EndpointSlice' | 'Node' | 'ServiceCIDR';

export interface SourceEvent {
  type: 'upsert' | 'delete';
  kind: WatchedKind;
  /** The object as JSON-decoded from the API or a manifest. */
  object: unknown;
  /** Where it came from, for error messages: "api", or "<file>#2" (the file and the document's index in it). */
  origin: string;
}
