package control

import "time"

// Status is the reply of platform.v1.status: the region's nodes, its
// JetStream meta leader, and the replica health of every stream.
type Status struct {
	Region     string         `json:"region"`
	Domain     string         `json:"domain"`
	Server     string         `json:"server"` // the node that answered
	MetaLeader string         `json:"meta_leader"`
	Nodes      []NodeStatus   `json:"nodes"`
	Streams    []StreamStatus `json:"streams"`
	Time       time.Time      `json:"time"`
}

// NodeStatus is one member of the region's JetStream meta group.
type NodeStatus struct {
	Name    string        `json:"name"`
	Leader  bool          `json:"leader"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline"`
	Active  time.Duration `json:"active"` // since last seen by the leader
	Lag     uint64        `json:"lag"`
}

// StreamStatus is one stream and the state of its replicas.
type StreamStatus struct {
	Name     string        `json:"name"`
	Kind     string        `json:"kind"` // topic, queue or "" for other streams
	Replicas int           `json:"replicas"`
	Leader   string        `json:"leader"`
	Peers    []ReplicaPeer `json:"peers"`
	Messages uint64        `json:"messages"`
	Bytes    uint64        `json:"bytes"`
}

// ReplicaPeer is one follower of a stream as its leader sees it.
type ReplicaPeer struct {
	Name    string        `json:"name"`
	Current bool          `json:"current"`
	Offline bool          `json:"offline"`
	Lag     uint64        `json:"lag"`
	Active  time.Duration `json:"active"`
}

// Current counts the replicas current with the leader, the leader included.
func (s StreamStatus) Current() int {
	if s.Leader == "" {
		return 0
	}
	n := 1
	for _, p := range s.Peers {
		if p.Current {
			n++
		}
	}
	return n
}
