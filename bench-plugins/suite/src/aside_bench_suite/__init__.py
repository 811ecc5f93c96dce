"""What every suite of aside-bench is built on: an item's result, the run
skeleton, the run record (report.json) and the driver's samples read back."""
