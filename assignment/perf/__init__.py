"""Performance tools on one timing harness: timing (the harness the grader scores with), the bench cases, the
scaling sweep, the profile report and the student targets. They take a task's code as an argument; the commands
that look tasks up and loop over them are assignment/commands/."""
