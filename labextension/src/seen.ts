/** Each notice once, whichever way it came (the server's answer or the hub's). */
export class Seen {
  /** True the first time `at` is seen. */
  first(at: number | string): boolean {
    const key = String(at);
    if (this._seen.has(key)) {
      return false;
    }
    this._seen.add(key);
    return true;
  }

  private _seen = new Set<string>();
}

/** Health messages already shown in this tab, by either plugin (the stream or the notices). */
const healthShown = new Set<string>();

/** True the first time this GPU health message is to be shown in this tab. */
export function firstHealth(message: string): boolean {
  if (healthShown.has(message)) {
    return false;
  }
  healthShown.add(message);
  return true;
}
