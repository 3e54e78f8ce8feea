"""The classic consumer group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup."""
