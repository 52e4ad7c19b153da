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
