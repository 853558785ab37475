from llmgym.algorithms.episode_stats import EpisodeStats


def test_episode_stats_window():
    stats = EpisodeStats(window=2)
    assert stats.summary() == {}
    for ret, success in ((0.0, False), (1.0, True), (3.0, True)):
        stats.add({"return": ret, "length": 2, "success": success})
    summary = stats.summary()
    assert summary["episode_return"] == 2.0 and summary["success_rate"] == 1.0 and summary["episodes"] == 3.0
