"""Template filters of the capacity page and the owners' track record."""

from django import template

register = template.Library()


@register.filter
def duration(seconds: int | None) -> str:
    """Seconds as the track record says them: `0 min`, `45 min`, `3 h 05 min`, `2 d 4 h`."""
    minutes = int(seconds or 0) // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"
