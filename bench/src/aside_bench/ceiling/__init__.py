"""The ceiling: the highest rate an arm holds, found by a search over trials
(search.py), and its report (report.py)."""
