"""Performance tools on one timing harness: timing (the harness the grader scores with), bench, scaling, profile."""
