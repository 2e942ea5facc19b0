"""ludus.policies"""
