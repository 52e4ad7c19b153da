/**
 * What Keep's and Release's answers mean for the user (pure; tested in __tests__).
 */
import { keptMessage, refusal } from './format';
import { IReply } from './types';

export interface IKeepReply {
  kept_until?: number | null;
  /** While another user waits for this size the keep holds only until then. */
  contended_until?: number | null;
  message?: string;
}

export interface IOutcome {
  ok: boolean;
  /** What to tell the user. */
  message: string;
}

/** "Your GPU is kept until 15:05.", or the hub's refusal in its own words. */
export function keepOutcome(r: IReply<IKeepReply>): IOutcome {
  return r.ok
    ? { ok: true, message: keptMessage(r.body.kept_until, r.body.contended_until) }
    : { ok: false, message: refusal('keep your GPU', r.status, r.body) };
}

export const RELEASED =
  'Your GPU is released; this server stops. Going back to the hub ...';

/**
 * Release's answer. The hub stops this very server before it answers, so an answer that
 * never came (status 0) or a 5xx from the proxy means it is going: only a refusal (4xx)
 * is one.
 */
export function releaseOutcome(r: IReply<{ message?: string }>): IOutcome {
  return r.ok || r.status === 0 || r.status >= 500
    ? { ok: true, message: RELEASED }
    : { ok: false, message: refusal('release your GPU', r.status, r.body) };
}
