"""The ceiling: the highest rate an arm holds, its search and its report."""
