"""The one error type of checkpoint conversion: it names the tensor, file or field and what was expected."""


class ConversionError(ValueError):
    """A checkpoint cannot be converted as asked. Raised before anything is written."""

    @classmethod
    def from_problems(cls, problems: list[str], context: str, shown: int = 20) -> "ConversionError":
        """One error listing every problem found (the first `shown`), so a user fixes them all in one pass."""
        lines = problems[:shown]
        if len(problems) > shown:
            lines.append(f"... and {len(problems) - shown} more")
        return cls(f"{context}: {len(problems)} problem(s)\n  " + "\n  ".join(lines))
