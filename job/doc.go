// Package job holds jobs: one device command (package command) rolled
// out to a fleet at a controlled pace, with an optional ramp, abort
// criteria and retries (docs/jobs.md). It accepts jobs with their
// targets fixed, and its Runner starts their commands step by step,
// each step stored with the commands it makes, so that a job resumes
// after a crash, or on another node, with no device given two commands
// for one attempt.
package job
