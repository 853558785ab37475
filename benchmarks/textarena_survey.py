"""Survey of TextArena's registry: which games run offline, for how many players, how fast.

For every textarena id (not its ``-raw``/``-train`` copies) it runs, in a subprocess with a time
limit, ``ta.make`` + ``reset(num_players=n, seed=0)`` for n = 1 then 2, then up to 12 steps whose
actions are bracketed tokens drawn (seeded) from the observation text, twice with the same seed
(the second time after scrambling Python's global ``random``), and reports one line per id:
status (``ok``, ``nltk``, ``api``, ``download``, ``players`` for games of 3+ players, ``crash``,
``timeout``), number of players, seconds per reset and per step, whether the two runs agreed, and
the error of a failing game. This is what ``llmgym/envs/textarena_games.py`` records as data.

Run: ``python benchmarks/textarena_survey.py [--timeout 30] [IDS...]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_PROBE = r"""
import json, random, re, sys, time
import textarena as ta

def make(env_id):
    name = env_id + "-raw" if env_id + "-raw" in ta.envs.registration.ENV_REGISTRY else env_id
    return ta.make(name)

def run(env_id, n):
    env = make(env_id)
    t0 = time.perf_counter()
    env.reset(num_players=n, seed=0)
    t_reset = time.perf_counter() - t0
    rng = random.Random(1)
    trace, steps, t_steps = [], 0, 0.0
    for _ in range(12):
        pid, obs = env.get_observation()
        text = "\n".join(m[1] for m in obs) if isinstance(obs, list) else str(obs)
        trace.append((pid, text))
        tokens = re.findall(r"\[[^\[\]\n]{1,24}\]", text) or ["[a]"]
        t0 = time.perf_counter()
        done, _ = env.step(rng.choice(tokens))
        t_steps += time.perf_counter() - t0
        steps += 1
        if done:
            break
    rewards, _ = env.close()
    trace.append(json.dumps(rewards, sort_keys=True, default=str))
    return trace, t_reset, t_steps / max(steps, 1)

env_id = sys.argv[1]
out = {"id": env_id}
try:
    make(env_id)
    players = (1, 2)
except BaseException as exc:
    out.update(players=None, error=f"{type(exc).__name__}: {exc}"[:300])
    players = ()
for n in players:
    try:
        first, t_reset, t_step = run(env_id, n)
        random.seed(12345)
        second, _, _ = run(env_id, n)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        out.update(players=n, error=error[:300])
        if "player" in error.lower():  # a player-count check: try the next count
            continue
        break
    out.update(players=n, error=None, reset_s=round(t_reset, 4), step_s=round(t_step, 4),
               deterministic=first == second)
    break
print(json.dumps(out))
"""

_MARKERS = {
    "nltk": ("nltk", "punkt", "wordnet", "words corpus", "Resource "),
    "api": ("OPENROUTER", "api_key", "API key", "OpenAI", "openai", "api key"),
    "download": (
        "urlopen",
        "ConnectionError",
        "Max retries",
        "HTTPSConnection",
        "download",
        "Name or service",
    ),
    "players": ("player",),
}


def _status(result: dict) -> str:
    error = result.get("error")
    if error is None:
        return "ok"
    for status, markers in _MARKERS.items():
        if any(marker in error for marker in markers):
            return status
    return "crash"


def _ids() -> list[str]:
    code = (
        "import textarena as ta; reg = ta.envs.registration.ENV_REGISTRY; "
        "print('\\n'.join(k for k in reg if not k.endswith(('-raw', '-train'))))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()


def survey(env_id: str, timeout: float) -> dict:
    """Probe one textarena id in a subprocess.

    Args:
        env_id: A textarena id, e.g. ``"TicTacToe-v0"``.
        timeout: Seconds before the probe counts as hung.

    Returns:
        The probe's result with its ``status``.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, env_id], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"id": env_id, "status": "timeout", "error": f"no result within {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"id": env_id, "status": "crash", "error": tail[0][:300]}
    result = json.loads(lines[-1])
    result["status"] = _status(result)
    return result


def main() -> None:
    """Survey the ids given (all of textarena's by default) and print one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="textarena ids (default: the whole registry)")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    for env_id in args.ids or _ids():
        print(json.dumps(survey(env_id, args.timeout)), flush=True)


if __name__ == "__main__":
    main()
