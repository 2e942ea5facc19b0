"""ludus.envs"""
