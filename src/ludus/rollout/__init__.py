"""ludus.rollout"""
