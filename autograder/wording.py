"""Small pieces of student-facing wording, shared by the checks and the reports."""


def ranks_text(ranks) -> str:
    """[1] -> 'rank 1'; [0, 1, 2] -> 'ranks 0, 1 and 2'."""
    ranks = list(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def points(value: float) -> str:
    """17.0 -> '17', 0.5 -> '0.5'."""
    return f"{value:g}"
