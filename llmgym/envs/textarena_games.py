"""TextArena's games as llmgym runs them: the survey of textarena 0.7.4's registry, as data.

Made by ``benchmarks/textarena_survey.py`` (each id made, reset and stepped offline with seeded
random bracketed moves, in a subprocess with a time limit, for 1 then 2 players) and written here
by hand, so that registering the ``llmgym/TextArena-*`` ids imports no textarena. One llmgym id per
game of :data:`SINGLE_PLAYER` and :data:`TWO_PLAYER`; their :data:`VARIANTS` (sizes, rules) are
played with ``gymnasium.make("llmgym/TextArena-v0", game=...)``; :data:`EXCLUDED` says why each other
textarena id is left out (NLTK corpora, API keys, crashes, 3+ players, and the two-player games
whose random opponent finds no legal move, checked with ``benchmarks/textarena_baseline.py``).
``Sudoku-v0-hard`` runs but takes about 12 s per reset (its generator searches for a 20-clue grid).
"""

from __future__ import annotations

import difflib

from llmgym.errors import ConfigError

__all__ = [
    "SINGLE_PLAYER",
    "TWO_PLAYER",
    "VARIANTS",
    "EXCLUDED",
    "REUSED_ACROSS_RESETS",
    "llmgym_id",
    "check_game",
    "players",
]

_NLTK = "needs NLTK's 'words' corpus, which textarena downloads at first use (offline it raises LookupError)"
_NO_OPPONENT = "has no offline opponent: it neither lists its moves nor takes the bracketed tokens of its messages, so the random opponent forfeits at once (or, in Santorini, is asked again forever)"
_API_KEY = "needs an OpenRouter API key (an LLM judge or opponent inside the game)"

#: Single-player games (puzzles), textarena id -> what the agent does.
SINGLE_PLAYER: dict[str, str] = {
    "2048-v0": "slide and merge tiles on a 4x4 board to reach the 2048 tile",
    "Bandit-v0": "find the best of five buttons of a multi-armed bandit in 20 pulls",
    "Blackjack-v0": "play five hands of blackjack against the dealer",
    "Crosswords-v0": "fill in a small crossword from its clues",
    "FifteenPuzzle-v0": "slide the tiles of the 15-puzzle into order",
    "FrozenLake-v0": "walk a 4x4 frozen lake to the goal without falling into a hole",
    "GuessTheNumber-v0": "guess a number from 1 to 20 from higher/lower hints",
    "LightsOut-v0": "switch off every light of a 5x5 Lights Out board",
    "LogicPuzzle-v0": "solve a small logic grid puzzle from its clues",
    "Mastermind-v0": "find a 4-digit code from black/white peg feedback",
    "Minesweeper-v0": "reveal every safe cell of an 8x8 minefield",
    "PegJump-v0": "jump pegs on a triangular board until one peg is left",
    "RushHour-v0": "slide the cars of a Rush Hour grid to free the red car",
    "Secretary-v0": "stop at the best of five values seen one at a time",
    "Set-v0": "find sets of three cards in a deal of Set",
    "Sokoban-v0": "push three boxes onto their targets in a 6x6 room",
    "Sudoku-v0": "complete a 9x9 Sudoku with 60 clues given",
    "TowerOfHanoi-v0": "move three disks from tower A to tower C",
}
#: Two-player games, played against the env's seeded random opponent.
TWO_PLAYER: dict[str, str] = {
    "Battleship-v0": "Battleship on a 5x5 grid against a random opponent",
    "Briscola-v0": "the Italian card game Briscola against a random opponent",
    "Chopsticks-v0": "the finger game Chopsticks against a random opponent",
    "ColonelBlotto-v0": "Colonel Blotto: split 20 units over 3 fields, 9 rounds, against a random opponent",
    "ConnectFour-v0": "Connect Four on a 6x7 board against a random opponent",
    "Crusade-v0": "Crusade, a chess-like capture game, against a random opponent",
    "GameOfPureStrategy-v0": "the Game of Pure Strategy (bid cards for prizes) against a random opponent",
    "GermanWhist-v0": "the trick-taking card game German Whist against a random opponent",
    "Golf-v0": "the card game Golf (lowest score wins) against a random opponent",
    "HighSociety-v0": "the auction card game High Society against a random opponent",
    "IndianPoker-v0": "five rounds of Indian poker against a random opponent",
    "IteratedMatchingPennies-v0": "iterated matching pennies against a random opponent",
    "IteratedPrisonersDilemma-v0": "an iterated prisoner's dilemma with chat against a random opponent",
    "IteratedRockPaperScissors-v0": "iterated rock-paper-scissors against a random opponent",
    "IteratedTwoThirdsAverage-v0": "iterated guess-two-thirds-of-the-average against a random opponent",
    "IteratedUltimatumGame-v0": "an iterated ultimatum game against a random opponent",
    "KuhnPoker-v0": "Kuhn poker (three-card poker) against a random opponent",
    "LiarsDice-v0": "Liar's Dice with five dice each against a random opponent",
    "MarketEntryGame-v0": "a market entry game with chat against a random opponent",
    "MemoryGame-v0": "the card-matching Memory game against a random opponent",
    "NewRecruit-v0": "a recruiter-candidate negotiation against a random opponent",
    "Nim-v0": "Nim with piles of 3, 4 and 5 (take the last object) against a random opponent",
    "Othello-v0": "Othello (Reversi) on an 8x8 board against a random opponent",
    "PigDice-v0": "the dice game Pig (roll or hold) against a random opponent",
    "Poker-v0": "ten hands of Texas hold'em against a random opponent",
    "PublicGoodsGame-v0": "a public goods game with chat against a random opponent",
    "QuantumTicTacToe-v0": "quantum tic-tac-toe against a random opponent",
    "SimpleBlindAuction-v0": "a blind auction of items against a random opponent",
    "SimpleNegotiation-v0": "a resource trading negotiation against a random opponent",
    "SimpleTak-v0": "Simple Tak (build a road across the board) against a random opponent",
    "Snake-v0": "two-snake Snake on a small grid against a random opponent",
    "SpiteAndMalice-v0": "the card game Spite and Malice against a random opponent",
    "Stratego-v0": "Stratego against a random opponent",
    "Surround-v0": "Surround (Tron light cycles) against a random opponent",
    "Tak-v0": "Tak on a 4x4 board against a random opponent",
    "TicTacToe-v0": "tic-tac-toe against a random opponent",
    "TruthAndDeception-v0": "tell the true fact from the false one, or deceive, against a random opponent",
    "TwoDollar-v0": "split two dollars by negotiation against a random opponent",
    "UltimateTicTacToe-v0": "ultimate tic-tac-toe (nine boards) against a random opponent",
    "WildTicTacToe-v0": "wild tic-tac-toe (play X or O) against a random opponent",
}
#: Runnable variants (other sizes or rules), for ``game=``, -> their game.
VARIANTS: dict[str, str] = {
    "2048-v0-10x10": "2048-v0",
    "2048-v0-3x3": "2048-v0",
    "2048-v0-5x5": "2048-v0",
    "2048-v0-6x6": "2048-v0",
    "2048-v0-8x8": "2048-v0",
    "2048-v0-easy": "2048-v0",
    "2048-v0-extreme": "2048-v0",
    "2048-v0-hard": "2048-v0",
    "2048-v0-mega-easy": "2048-v0",
    "2048-v0-super-easy": "2048-v0",
    "2048-v0-ultra-easy": "2048-v0",
    "2048-v0-very-easy": "2048-v0",
    "2048-v0-very-hard": "2048-v0",
    "Bandit-v0-hard": "Bandit-v0",
    "Battleship-v0-extreme": "Battleship-v0",
    "Battleship-v0-large": "Battleship-v0",
    "Battleship-v0-standard": "Battleship-v0",
    "Blackjack-v0-long": "Blackjack-v0",
    "Chopsticks-v0-long": "Chopsticks-v0",
    "Chopsticks-v0-medium": "Chopsticks-v0",
    "ColonelBlotto-v0-extreme": "ColonelBlotto-v0",
    "ColonelBlotto-v0-large": "ColonelBlotto-v0",
    "ColonelBlotto-v0-small": "ColonelBlotto-v0",
    "ConnectFour-v0-blind": "ConnectFour-v0",
    "ConnectFour-v0-large": "ConnectFour-v0",
    "Crosswords-v0-hardcore": "Crosswords-v0",
    "FrozenLake-v0-hardcore": "FrozenLake-v0",
    "FrozenLake-v0-random": "FrozenLake-v0",
    "Golf-v0-medium": "Golf-v0",
    "GuessTheNumber-v0-hardcore": "GuessTheNumber-v0",
    "IndianPoker-v0-extreme": "IndianPoker-v0",
    "IndianPoker-v0-long": "IndianPoker-v0",
    "IndianPoker-v0-medium": "IndianPoker-v0",
    "IndianPoker-v0-short": "IndianPoker-v0",
    "IteratedUltimatumGame-v0-alternate": "IteratedUltimatumGame-v0",
    "KuhnPoker-v0-extreme": "KuhnPoker-v0",
    "KuhnPoker-v0-long": "KuhnPoker-v0",
    "KuhnPoker-v0-medium": "KuhnPoker-v0",
    "KuhnPoker-v0-short": "KuhnPoker-v0",
    "LiarsDice-v0-large": "LiarsDice-v0",
    "LiarsDice-v0-small": "LiarsDice-v0",
    "LogicPuzzle-v0-hard": "LogicPuzzle-v0",
    "Mastermind-v0-extreme": "Mastermind-v0",
    "Mastermind-v0-hard": "Mastermind-v0",
    "MemoryGame-v0-hard": "MemoryGame-v0",
    "MemoryGame-v0-medium": "MemoryGame-v0",
    "Minesweeper-v0-hard": "Minesweeper-v0",
    "Minesweeper-v0-medium": "Minesweeper-v0",
    "Minesweeper-v0-small": "Minesweeper-v0",
    "Nim-v0-large": "Nim-v0",
    "Nim-v0-medium": "Nim-v0",
    "Othello-v0-big": "Othello-v0",
    "Othello-v0-hard": "Othello-v0",
    "Othello-v0-huge": "Othello-v0",
    "Othello-v0-small": "Othello-v0",
    "Othello-v0-tiny": "Othello-v0",
    "PigDice-v0-100": "PigDice-v0",
    "PigDice-v0-150": "PigDice-v0",
    "PigDice-v0-200": "PigDice-v0",
    "PigDice-v0-250": "PigDice-v0",
    "PigDice-v0-300": "PigDice-v0",
    "PigDice-v0-350": "PigDice-v0",
    "PigDice-v0-400": "PigDice-v0",
    "PigDice-v0-450": "PigDice-v0",
    "PigDice-v0-50": "PigDice-v0",
    "PigDice-v0-500": "PigDice-v0",
    "PigDice-v0-long": "PigDice-v0",
    "PigDice-v0-short": "PigDice-v0",
    "Poker-v0-extreme": "Poker-v0",
    "Poker-v0-long": "Poker-v0",
    "Poker-v0-small": "Poker-v0",
    "Secretary-v0-long": "Secretary-v0",
    "SimpleBlindAuction-v0-quick": "SimpleBlindAuction-v0",
    "SimpleBlindAuction-v0-rich": "SimpleBlindAuction-v0",
    "SimpleNegotiation-v0-long": "SimpleNegotiation-v0",
    "SimpleNegotiation-v0-short": "SimpleNegotiation-v0",
    "SimpleTak-v0-extreme": "SimpleTak-v0",
    "SimpleTak-v0-large": "SimpleTak-v0",
    "SimpleTak-v0-medium": "SimpleTak-v0",
    "Snake-v0-large": "Snake-v0",
    "Snake-v0-standard": "Snake-v0",
    "Sokoban-v0-medium": "Sokoban-v0",
    "Sudoku-v0-easy": "Sudoku-v0",
    "Sudoku-v0-hard": "Sudoku-v0",
    "Sudoku-v0-medium": "Sudoku-v0",
    "Sudoku-v0-very-easy": "Sudoku-v0",
    "Surround-v0-large": "Surround-v0",
    "Surround-v0-standard": "Surround-v0",
    "Tak-v0-hard": "Tak-v0",
    "Tak-v0-medium": "Tak-v0",
    "TowerOfHanoi-v0-extreme": "TowerOfHanoi-v0",
    "TowerOfHanoi-v0-hard": "TowerOfHanoi-v0",
    "TowerOfHanoi-v0-hardcore": "TowerOfHanoi-v0",
    "TowerOfHanoi-v0-medium": "TowerOfHanoi-v0",
    "TruthAndDeception-v0-extreme": "TruthAndDeception-v0",
    "TruthAndDeception-v0-long": "TruthAndDeception-v0",
}
#: The rest of textarena's registry, id -> why llmgym does not run it.
EXCLUDED: dict[str, str] = {
    "Alquerque-v0": _NO_OPPONENT,
    "BabyAiText-v0": "crashes on make: No module named 'gym' (textarena 0.7.4)",
    "Breakthrough-v0": _NO_OPPONENT,
    "Breakthrough-v0-blind": _NO_OPPONENT,
    "Breakthrough-v0-large": _NO_OPPONENT,
    "Breakthrough-v0-long": _NO_OPPONENT,
    "Breakthrough-v0-small": _NO_OPPONENT,
    "Breakthrough-v0-tiny": _NO_OPPONENT,
    "CharacterConclave-v0": "is a game of 3 to 15 players; llmgym plays 1- and 2-player games",
    "CharacterConclave-v0-extreme": "is a game of 3 to 15 players; llmgym plays 1- and 2-player games",
    "CharacterConclave-v0-long": "is a game of 3 to 15 players; llmgym plays 1- and 2-player games",
    "Checkers-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Checkers-v0-long": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Chess-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Chess-v0-blind": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Chess-v0-long": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Codenames-v0": _NLTK,
    "Codenames-v0-hardcore": _NLTK,
    "Countdown-v0": "crashes within its first moves in textarena 0.7.4 (TypeError: sequence item 0: expected str instance, int found)",
    "Cryptarithm-v0": "crashes within its first moves in textarena 0.7.4 (TypeError: sequence item 0: expected str instance, int found)",
    "Debate-v0": _API_KEY,
    "Debate-v0-long": _API_KEY,
    "Debate-v0-medium": _API_KEY,
    "DontSayIt-v0": _NLTK,
    "DontSayIt-v0-hardcore": _NLTK,
    "DontSayIt-v0-unlimited": _NLTK,
    "GuessWho-v0": _API_KEY,
    "Hangman-v0": _NLTK,
    "Hangman-v0-hardcore": _NLTK,
    "IteratedStagHunt-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "IteratedStagHunt-v0-randomized": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "Klondike-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "LetterAuction-v0": _NLTK,
    "LetterAuction-v0-hard": _NLTK,
    "LetterAuction-v0-medium": _NLTK,
    "LinesOfAction-v0": _NO_OPPONENT,
    "ReverseTicTacToe-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "SantoriniBaseFixed-v0": _NO_OPPONENT,
    "ScenarioPlanning-v0": _API_KEY,
    "ScorableGames-v0": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-7players": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-conservative": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-game1": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-game2": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-game3": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-medicalethics": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "ScorableGames-v0-vendorretailer": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "SecretMafia-v0": "is a game of 5 to 15 players; llmgym plays 1- and 2-player games",
    "SettlersOfCatan-v0": "is a game of exactly 4 players; llmgym plays 1- and 2-player games",
    "Slitherlink-v0": "crashes within its first moves in textarena 0.7.4 (TypeError: sequence item 0: expected str instance, int found)",
    "SpellingBee-v0": _NLTK,
    "SpellingBee-v0-large": _NLTK,
    "SpellingBee-v0-small": _NLTK,
    "Taboo-v0": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-animals": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-cars": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-city/country": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-food": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-full": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-literature": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-long": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-people": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "Taboo-v0-tv": "is a game of 4 or more players; llmgym plays 1- and 2-player games",
    "ThreeCardMonte-v0": "crashes on a second invalid move in textarena 0.7.4 (it passes set_invalid_move's reward and reason in the wrong order, so the reward is a string)",
    "ThreePlayerGOPS-v0": "is a game of exactly 3 players; llmgym plays 1- and 2-player games",
    "ThreePlayerIPD-v0": "is a game of exactly 3 players; llmgym plays 1- and 2-player games",
    "ThreePlayerTicTacToe-v0": "is a game of exactly 3 players; llmgym plays 1- and 2-player games",
    "TwentyQuestions-v0": _API_KEY,
    "TwentyQuestions-v0-hardcore": _API_KEY,
    "UltimateTexasHoldem-v0": "crashes on import under Python 3.11 (textarena 0.7.4's module has a SyntaxError)",
    "UsedCar-v0-balanced": "crashes on make: No module named 'textarena.envs.UsedCar' (textarena 0.7.4)",
    "UsedCarNegotiation-v0": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "UsedCarNegotiation-v0-strong-buyer": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "UsedCarNegotiation-v0-strong-seller": "crashes: its data files are missing from the textarena 0.7.4 wheel",
    "WordChains-v0": _NLTK,
    "WordLadder-v0": _NLTK,
    "WordLadder-v0-hard": _NLTK,
    "WordLadder-v0-medium": _NLTK,
    "Wordle-v0": _NLTK,
    "Wordle-v0-hardcore": _NLTK,
    "Wordle-v0-long": _NLTK,
    "Wordle-v0-long-hardcore": _NLTK,
    "WordSearch-v0": _NLTK,
    "WordSearch-v0-hardcore": _NLTK,
}
#: Games whose object the env makes once and resets, where other games get a new object per reset
#: (KuhnPoker shuffles its deck in place, SpiteAndMalice fails on a second reset): Set builds its
#: table of all sets in its constructor (0.2 s) and resets cleanly (same seed, same game, checked
#: after other games on the same object).
REUSED_ACROSS_RESETS: frozenset[str] = frozenset({"Set-v0"})


def llmgym_id(game: str) -> str:
    """The llmgym id of a game of :data:`SINGLE_PLAYER` or :data:`TWO_PLAYER`.

    Args:
        game: A textarena id ending in ``-v0``, e.g. ``"Sudoku-v0"``.

    Returns:
        E.g. ``"llmgym/TextArena-Sudoku-v0"``.
    """
    return f"llmgym/TextArena-{game.removesuffix('-v0')}-v0"


def check_game(game: object) -> str:
    """Check that a textarena id is one llmgym runs, and return its game.

    Args:
        game: A textarena id, e.g. ``"TowerOfHanoi-v0"`` or the variant ``"TowerOfHanoi-v0-medium"``.

    Returns:
        The game's id in :data:`SINGLE_PLAYER` or :data:`TWO_PLAYER`.

    Raises:
        ConfigError: If ``game`` is not a string, is excluded (the message says why) or is unknown.
    """
    if not isinstance(game, str):
        raise ConfigError(
            f"game={game!r:.100} is a {type(game).__name__}; expected a textarena id such as 'TicTacToe-v0'."
        )
    if game in SINGLE_PLAYER or game in TWO_PLAYER:
        return game
    if game in VARIANTS:
        return VARIANTS[game]
    if game in EXCLUDED:
        raise ConfigError(
            f"TextArena game {game!r} is not available in llmgym: it {EXCLUDED[game]}. Fix: pick another game; "
            "`llmgym envs` lists the llmgym/TextArena-* ids, and docs/envs.md the variants."
        )
    known = [*SINGLE_PLAYER, *TWO_PLAYER, *VARIANTS]
    close = difflib.get_close_matches(game, known, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"game={game!r} is not a textarena id that llmgym knows.{hint} Fix: pass an id of "
        "llmgym.envs.textarena_games.SINGLE_PLAYER, TWO_PLAYER or VARIANTS, e.g. 'TicTacToe-v0'."
    )


def players(game: str) -> int:
    """The number of players of a game of :data:`SINGLE_PLAYER` or :data:`TWO_PLAYER`: 1 or 2."""
    return 2 if game in TWO_PLAYER else 1
