"""The performance model: what one step of a job costs on its cluster, and the step plan the run replays."""
