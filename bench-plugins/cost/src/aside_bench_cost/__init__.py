"""aside-bench's cost tool: the load driver's own CPU per request against a plain net/http loop."""
