package consumer

import (
	"cmp"
	"slices"
)

// groupAssignment is the replicated partition assignment of a group: the
// value of key <group>.assignment in the membership bucket. Its KV
// revision is the assignment's generation, the fencing token.
type groupAssignment struct {
	// Members are the live members it was computed for, sorted.
	Members []string `json:"members"`
	// Owners[p] is the member owning partition p ("" for none).
	Owners []string `json:"owners"`
}

// memberRecord is a member's heartbeat: the value of key
// <group>.member.<id>.
type memberRecord struct {
	ID string `json:"id"`
	// Holds are the partitions the member is consuming now; a partition is
	// taken over only once no live member holds it.
	Holds []int `json:"holds"`
	// Gen is the assignment generation the member acts on.
	Gen uint64 `json:"gen"`
}

// assign computes a balanced, sticky assignment of partitions to live
// members (sorted, unique). Every member gets partitions/len(live) or one
// more; the members getting one more are those already owning the most
// (ties: lower id). Each member keeps as many of its current partitions
// as its quota allows (the lowest first); only orphaned and surplus
// partitions move, to the members below quota in id order. The result is
// a function of its inputs only, so every member computes the same.
func assign(partitions int, live []string, prev []string) []string {
	owners := make([]string, partitions)
	if len(live) == 0 {
		return owners
	}
	isLive := make(map[string]bool, len(live))
	for _, m := range live {
		isLive[m] = true
	}
	current := map[string][]int{}
	for p := 0; p < partitions && p < len(prev); p++ {
		if o := prev[p]; o != "" && isLive[o] {
			current[o] = append(current[o], p)
		}
	}
	order := slices.Clone(live)
	slices.SortStableFunc(order, func(a, b string) int {
		if c := cmp.Compare(len(current[b]), len(current[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	base, extra := partitions/len(live), partitions%len(live)
	quota := make(map[string]int, len(live))
	for i, m := range order {
		quota[m] = base
		if i < extra {
			quota[m]++
		}
	}
	var pool []int
	taken := make([]bool, partitions)
	for _, m := range live {
		keep := current[m]
		if len(keep) > quota[m] {
			pool = append(pool, keep[quota[m]:]...)
			keep = keep[:quota[m]]
		}
		for _, p := range keep {
			owners[p] = m
			taken[p] = true
		}
		quota[m] -= len(keep)
	}
	for p := range partitions {
		if !taken[p] && !slices.Contains(pool, p) {
			pool = append(pool, p)
		}
	}
	slices.Sort(pool)
	for _, m := range live {
		for ; quota[m] > 0 && len(pool) > 0; quota[m]-- {
			owners[pool[0]] = m
			pool = pool[1:]
		}
	}
	return owners
}

// ownedBy lists the partitions owned by member.
func (a *groupAssignment) ownedBy(member string) []int {
	var out []int
	for p, o := range a.Owners {
		if o == member {
			out = append(out, p)
		}
	}
	return out
}
