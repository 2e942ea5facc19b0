"""ludus.tasks"""
