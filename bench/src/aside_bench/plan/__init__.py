"""What a run will do: scenarios, arms, rates and the steps they make."""
