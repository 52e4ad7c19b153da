import { clock } from '../format';
import { keepOutcome, RELEASED, releaseOutcome } from '../outcomes';
import { Seen } from '../seen';

describe('Keep', () => {
  it('says until when', () => {
    expect(keepOutcome({ ok: true, status: 200, body: { kept_until: 1_800_000_000 } })).toEqual({
      ok: true,
      message: 'Your GPU is kept until ' + clock(1_800_000_000) + '.'
    });
  });
  it("gives the hub's refusal", () => {
    const message =
      'Your GPU is being released: the culler stopped this server before your Keep arrived. ' +
      'Start it again from the hub home page.';
    expect(keepOutcome({ ok: false, status: 409, body: { message } })).toEqual({
      ok: false,
      message: 'Could not keep your GPU: ' + message
    });
    expect(keepOutcome({ ok: false, status: 403, body: {} }).message).toBe('Could not keep your GPU: error 403');
  });
});

describe('Release', () => {
  it('goes on when the hub accepted it', () => {
    expect(releaseOutcome({ ok: true, status: 202, body: { releasing: true } } as any)).toEqual({
      ok: true,
      message: RELEASED
    });
  });
  it('goes on when the server stopped under the request', () => {
    expect(releaseOutcome({ ok: false, status: 0, body: {} }).ok).toBe(true);
    expect(releaseOutcome({ ok: false, status: 503, body: {} }).ok).toBe(true);
  });
  it('stops at a refusal', () => {
    expect(releaseOutcome({ ok: false, status: 409, body: { message: 'the server is busy' } })).toEqual({
      ok: false,
      message: 'Could not release your GPU: the server is busy'
    });
  });
});

describe('Seen', () => {
  it('says yes once per notice', () => {
    const s = new Seen();
    expect(s.first(1700000000.5)).toBe(true);
    expect(s.first(1700000000.5)).toBe(false);
    expect(s.first('1700000000.5')).toBe(false);
    expect(s.first(1700000001)).toBe(true);
  });
});
