"""The job templates srl-launch renders (package data): `hetjob.sbatch`, and README.md on writing your own."""
