# ab-summary.awk: the summary of an A/B run (scripts/ab-mount.sh,
# scripts/ab-bufwrite.sh). Input: one line per round, side and job,
# "ROUND SIDE NAME VALUE" (SIDE: A, B or kernel; VALUE: higher is better).
# Output per job: the median of the rounds' B/A ratios, their range, how
# many rounds B won, and the median of the rounds' B/kernel ratios.
{ v[$3, $2, $1] = $4; names[$3] = 1; rounds[$1] = 1 }
END {
	for (n in names) {
		k = 0
		for (r in rounds) if (((n, "A", r) in v) && ((n, "B", r) in v) && v[n, "A", r] > 0) {
			x[++k] = v[n, "B", r] / v[n, "A", r]
			kr[k] = v[n, "kernel", r] > 0 ? v[n, "B", r] / v[n, "kernel", r] : 0
		}
		if (k == 0) continue
		for (i = 1; i <= k; i++) for (m = i + 1; m <= k; m++) {
			if (x[m] < x[i]) { t = x[i]; x[i] = x[m]; x[m] = t }
			if (kr[m] < kr[i]) { t = kr[i]; kr[i] = kr[m]; kr[m] = t }
		}
		wins = 0; for (i = 1; i <= k; i++) if (x[i] > 1) wins++
		med = (k % 2) ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
		kmed = (k % 2) ? kr[(k + 1) / 2] : (kr[k / 2] + kr[k / 2 + 1]) / 2
		printf "%-24s B/A %.3f (rounds %.2f-%.2f, B won %d of %d); B/kernel %.2f\n", n, med, x[1], x[k], wins, k, kmed
	}
}
